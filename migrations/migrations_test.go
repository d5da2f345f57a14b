package migrations_test

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

func TestUpDownUpLeavesACleanSchema(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()

	require.NoError(t, migrations.Up(ctx, d.Pool))
	installed := dumpSchema(t, d.URL())
	require.Contains(t, installed, "CREATE TABLE public.distributed_locks")

	require.NoError(t, migrations.Down(ctx, d.Pool, migrations.AllSteps))
	require.Equal(t, []string{"table " + migrations.VersionTable}, schemaObjects(t, d.Pool),
		"down removes every object but golang-migrate's version table")

	require.NoError(t, migrations.Up(ctx, d.Pool))
	require.Equal(t, installed, dumpSchema(t, d.URL()))

	require.NoError(t, migrations.Down(ctx, d.Pool, 1))
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.Equal(t, status.Latest-1, status.Version, "Down(1) reverts one version")
}

// Each down file restores exactly the schema of the versions before it: Up then Down(n) equals
// the first files applied by hand (none, for the first file's down).
func TestDownRestoresThePreviousVersion(t *testing.T) {
	t.Parallel()
	files := upFiles(t)
	for keep := range len(files) {
		t.Run(fmt.Sprintf("down to version %d", keep), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			byHand := testdb.New(t, &testdb.Options{Unmigrated: true})
			applyByHand(t, byHand.URL(), files[:keep])
			downFrom := testdb.New(t, &testdb.Options{Unmigrated: true})
			require.NoError(t, migrations.Up(ctx, downFrom.Pool))
			require.NoError(t, migrations.Down(ctx, downFrom.Pool, len(files)-keep))
			require.Equal(t, dumpSchema(t, byHand.URL(), "--exclude-table="+migrations.VersionTable),
				dumpSchema(t, downFrom.URL(), "--exclude-table="+migrations.VersionTable))
		})
	}
}

// Five processes calling Up at once: one applies the files, and all of them succeed.
func TestConcurrentUpFromFiveProcesses(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})

	var wg sync.WaitGroup
	outputs := make([][]byte, 5)
	errs := make([]error, 5)
	for i := range outputs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), migrateUpHelperEnv+"="+d.URL())
			outputs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i := range outputs {
		require.NoError(t, errs[i], "process %d: %s", i, outputs[i])
	}

	requireUpToDate(t, d.Pool)
}

const migrateUpHelperEnv = "PGLOCK_TEST_MIGRATE_UP_URL"

// runMigrateUpHelper makes the test binary, when started by TestConcurrentUpFromFiveProcesses,
// a process that only calls Up.
func runMigrateUpHelper() bool {
	url := os.Getenv(migrateUpHelperEnv)
	if url == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = migrations.Up(ctx, pool)
		pool.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}

// The files applied by hand with psql, or through golang-migrate's URL interface as its CLI
// does, give the schema Up gives.
func TestFilesAppliedByHandMatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	viaUp := testdb.New(t, &testdb.Options{Unmigrated: true})
	require.NoError(t, migrations.Up(ctx, viaUp.Pool))
	want := dumpSchema(t, viaUp.URL(), "--exclude-table="+migrations.VersionTable)

	t.Run("psql", func(t *testing.T) {
		t.Parallel()
		byHand := testdb.New(t, &testdb.Options{Unmigrated: true})
		applyByHand(t, byHand.URL(), upFiles(t))
		require.Equal(t, want, dumpSchema(t, byHand.URL(), "--exclude-table="+migrations.VersionTable))
	})

	t.Run("golang-migrate CLI", func(t *testing.T) {
		t.Parallel()
		cli := buildMigrateCLI(t)
		byCLI := testdb.New(t, &testdb.Options{Unmigrated: true})
		config, err := pgx.ParseConfig(byCLI.URL())
		require.NoError(t, err)
		u := url.URL{Scheme: "pgx5", Host: fmt.Sprintf("%s:%d", config.Host, config.Port), Path: "/" + config.Database,
			User: url.UserPassword(config.User, config.Password)}
		u.RawQuery = url.Values{"sslmode": {"prefer"}, "x-migrations-table": {migrations.VersionTable}}.Encode()
		out, err := exec.Command(cli, "-path", ".", "-database", u.String(), "up").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, want, dumpSchema(t, byCLI.URL(), "--exclude-table="+migrations.VersionTable))
		status, err := migrations.Version(ctx, byCLI.Pool)
		require.NoError(t, err)
		require.Empty(t, status.Pending, "Version reads the version the CLI recorded")
	})
}

// buildMigrateCLI installs golang-migrate's CLI, at the version go.mod requires, into a
// temporary directory.
func buildMigrateCLI(t *testing.T) string {
	t.Helper()
	goTool := requireTool(t, "go")
	version, err := exec.Command(goTool, "list", "-m", "-f", "{{.Version}}", "github.com/golang-migrate/migrate/v4").Output()
	require.NoError(t, err)
	bin := t.TempDir()
	install := exec.Command(goTool, "install", "-tags", "pgx5",
		"github.com/golang-migrate/migrate/v4/cmd/migrate@"+strings.TrimSpace(string(version)))
	install.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod")
	out, err := install.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return filepath.Join(bin, "migrate")
}

// Installed into a schema named pglock, and used from Go through the pool's search_path.
func TestInstallIntoAChosenSchema(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Schema: "pglock"})
	ctx := context.Background()

	var inPglock, inPublic int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE n.nspname = 'pglock'), count(*) FILTER (WHERE n.nspname = 'public')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname IN ('distributed_locks', 'distributed_locks_fencing_token_seq', $1)`,
		migrations.VersionTable).Scan(&inPglock, &inPublic))
	require.Equal(t, 3, inPglock)
	require.Zero(t, inPublic)

	q := db.New(db.Translating(d.Pool))
	lock, err := q.TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "schema", HolderID: "h1", TtlMs: 5000, Metadata: []byte(`{}`), Instance: "test"})
	require.NoError(t, err)
	require.True(t, lock.Acquired)
	release, err := q.ReleaseLock(ctx, db.ReleaseLockParams{LockName: "schema", HolderID: "h1"})
	require.NoError(t, err)
	require.True(t, release.Released)

	requireUpToDate(t, d.Pool) // no drift either: the schema's name is in no hash, even where "pglock." is in a definition
	require.NoError(t, migrations.Repair(ctx, d.Pool))
	requireUpToDate(t, d.Pool)
}

// A schema whose name needs quoting ("Locks Here", not locks_here) gets everything, and the
// check looks at that schema, not at a namesake the unquoted name would parse to.
func TestInstallIntoASchemaWhoseNameNeedsQuoting(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE SCHEMA "Locks Here"`)
	require.NoError(t, err)
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = `"Locks Here"` })

	require.NoError(t, migrations.Up(ctx, pool))
	require.Equal(t, "Locks Here", tableSchema(t, pool, "distributed_locks"))
	require.Equal(t, "Locks Here", tableSchema(t, pool, migrations.VersionTable))
	require.NoError(t, migrations.Down(ctx, pool, migrations.AllSteps))

	_, err = d.Pool.Exec(ctx, `GRANT CREATE ON SCHEMA "Locks Here" TO PUBLIC`)
	require.NoError(t, err)
	require.ErrorIs(t, migrations.Up(ctx, pool), pglock.ErrUnsafeSchema)
}

// tableSchema names the schema of the table the pool's search_path finds by name.
func tableSchema(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var schema string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = to_regclass($1)", table).Scan(&schema))
	return strings.Trim(schema, `"`)
}

func TestVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("unmigrated, and it creates nothing", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, &testdb.Options{Unmigrated: true})
		status, err := migrations.Version(ctx, d.Pool)
		require.NoError(t, err)
		require.Zero(t, status.Version)
		require.False(t, status.Dirty)
		require.NotZero(t, status.Latest)
		require.Equal(t, "000001_pglock.up.sql", status.Pending[0])
		require.Len(t, status.Pending, int(status.Latest))
		require.Empty(t, schemaObjects(t, d.Pool))
	})
	t.Run("migrated", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, nil)
		requireUpToDate(t, d.Pool)
	})
	// Version reads the version table of the schema pglock installs into, never one that the
	// name finds further along search_path, where another role may have made it.
	t.Run("unmigrated, with another schema's table searched after", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, &testdb.Options{Unmigrated: true})
		creator := plantTraps(t, d)
		_, err := d.Pool.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA pglock_target; SET ROLE %s;
			CREATE VIEW public.%s AS SELECT 5::bigint AS version, public.hijacked(0, 0) AS dirty; RESET ROLE`,
			creator, migrations.VersionTable))
		require.NoError(t, err)
		pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "pglock_target, public" })

		status, err := migrations.Version(ctx, pool)
		require.NoError(t, err)
		require.Zero(t, status.Version)
		require.Len(t, status.Pending, int(status.Latest))
	})
	// Nor one in the session's pg_temp, searched first for tables unless named: code of another
	// role that the session ran may have left it there.
	t.Run("migrated, with a temporary view of that name left in the session", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, nil)
		creator := plantTraps(t, d)
		_, err := d.Pool.Exec(ctx, fmt.Sprintf(`SET ROLE %s;
			CREATE FUNCTION public.innocent() RETURNS void LANGUAGE plpgsql SECURITY DEFINER AS $$ BEGIN
				CREATE TEMPORARY VIEW %s AS SELECT 99::bigint AS version, public.hijacked(0, 0) AS dirty;
			END $$; RESET ROLE`, creator, migrations.VersionTable))
		require.NoError(t, err)
		pool := d.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
		_, err = pool.Exec(ctx, "SELECT public.innocent()")
		require.NoError(t, err)

		requireUpToDate(t, pool)
	})
	// Version looks at the table and reads it in one session, even when the pool's sessions
	// search different schemas.
	t.Run("migrated, on a pool whose sessions search different schemas", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, nil)
		creator := plantTraps(t, d)
		_, err := d.Pool.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA pglock_other; GRANT USAGE, CREATE ON SCHEMA pglock_other TO %[1]s;
			SET ROLE %[1]s; CREATE VIEW pglock_other.%[2]s AS SELECT 99::bigint AS version, public.hijacked(0, 0) AS dirty;
			RESET ROLE`, creator, migrations.VersionTable))
		require.NoError(t, err)
		var armed atomic.Bool
		var acquisitions atomic.Int32
		pool := d.NewPool(t, func(c *pgxpool.Config) {
			c.PrepareConn = func(ctx context.Context, conn *pgx.Conn) (bool, error) {
				searchPath := "public"
				if armed.Load() && acquisitions.Add(1) > 1 {
					searchPath = "pglock_other"
				}
				_, err := conn.Exec(ctx, "SELECT pg_catalog.set_config('search_path', $1, false)", searchPath)
				return err == nil, err
			}
		})
		armed.Store(true)

		requireUpToDate(t, pool)
	})
}

// golang-migrate does not give back the connection it took when its setup fails, here because a
// role that may create in the schema made a type of the version table's name. Up closes it.
func TestFailedUpLeavesNoConnectionOpen(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	creator := d.NewRole(t, "pglock_creator")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT CREATE ON SCHEMA public TO %[1]s;
		SET ROLE %[1]s; CREATE DOMAIN public.%[2]s AS integer; RESET ROLE`, creator, migrations.VersionTable))
	require.NoError(t, err)
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = "pglock_failed_up" })

	require.ErrorContains(t, migrations.Up(ctx, pool), "already exists")
	testdb.WaitFor(t, func() bool {
		return callBool(t, d.Pool, `SELECT count(*) <= 1 FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'pglock_failed_up'`)
	}, "only the pool's own connection is left")
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, steps := range []int{0, -2} {
		require.ErrorIs(t, migrations.Down(ctx, nil, steps), pglock.ErrInvalidArgument)
	}
	require.ErrorIs(t, migrations.Up(ctx, nil), pglock.ErrInvalidArgument)
	require.ErrorIs(t, migrations.Force(ctx, nil, -1), pglock.ErrInvalidArgument)
	_, err := migrations.Version(ctx, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
}

// A migrator waiting for another one stops waiting when its context ends, and leaves nothing
// behind: the database is neither changed nor marked dirty.
func TestUpStopsWaitingForAnotherMigratorWhenContextEnds(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()

	// Hold the lock another pglock migrator of this schema would hold: golang-migrate's key for
	// the version table, less one.
	key := golangMigrateLockKey(t, d.Pool)
	other, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", key-1)
	require.NoError(t, err)

	waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, migrations.Up(waitCtx, d.Pool), context.DeadlineExceeded)
	require.Empty(t, schemaObjects(t, d.Pool), "nothing was installed, not even a version table")

	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", key-1)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, d.Pool))
	requireUpToDate(t, d.Pool)
}

// SECURITY DEFINER functions in a schema every role may write could be hijacked: Up refuses.
func TestUpRefusesASchemaEveryRoleMayCreateIn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, "GRANT CREATE ON SCHEMA public TO PUBLIC")
	require.NoError(t, err)

	err = migrations.Up(ctx, d.Pool)
	require.ErrorIs(t, err, pglock.ErrUnsafeSchema)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code)
	require.Contains(t, pgErr.Hint, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	require.NotContains(t, err.Error(), "CREATE TABLE", "the error is the database's, not the file's text")
	require.Equal(t, []string{"table " + migrations.VersionTable}, schemaObjects(t, d.Pool), "nothing of pglock's was installed")

	// golang-migrate marks the failed version dirty; fixed, forced back, Up succeeds.
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.True(t, status.Dirty)
	require.Equal(t, "000001_pglock.up.sql", status.Pending[0], "the dirty version is pending")
	require.Error(t, migrations.Up(ctx, d.Pool), "a dirty database is not migrated further")
	_, err = d.Pool.Exec(ctx, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
	require.NoError(t, err)
	require.NoError(t, migrations.Force(ctx, d.Pool, 0))
	require.NoError(t, migrations.Up(ctx, d.Pool))
	requireUpToDate(t, d.Pool)
}

func TestDownMoreStepsThanApplied(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	require.NoError(t, migrations.Down(ctx, d.Pool, 1), "nothing applied: nothing to do")
	require.NoError(t, migrations.Up(ctx, d.Pool))
	require.NoError(t, migrations.Down(ctx, d.Pool, 99), "reverts what is applied")
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.Zero(t, status.Version)
	require.Equal(t, []string{"table " + migrations.VersionTable}, schemaObjects(t, d.Pool))
}

// A deployer that may only create objects in a schema installed pglock there, so owns its version
// table. Its upgrade by anyone else, even a superuser, is refused: golang-migrate would write the
// table as the upgrading role, and the deployer, its owner, could have given it a trigger. Once
// the table is handed to the schema's owner, the upgrade goes ahead.
func TestUpgradeOfADeployersInstallNeedsItsVersionTableHandedOver(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	owner, deployer := d.NewRole(t, "pglock_owner"), d.NewRole(t, "pglock_deployer")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`CREATE SCHEMA %[1]s AUTHORIZATION %[1]s; GRANT USAGE, CREATE ON SCHEMA %[1]s TO %[2]s`, owner, deployer))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := d.Pool.Exec(context.Background(), "DROP SCHEMA "+owner+" CASCADE")
		require.NoError(t, err)
	})
	asDeployer, asSuperuser := poolInSchema(t, d, owner, deployer), poolInSchema(t, d, owner, "")
	require.NoError(t, migrations.Up(ctx, asDeployer))
	require.NoError(t, migrations.Down(ctx, asDeployer, 1))

	err = migrations.Up(ctx, asSuperuser)
	require.ErrorIs(t, err, pglock.ErrUnsafeSchema)
	require.ErrorContains(t, err, deployer)
	status, err := migrations.Version(ctx, asDeployer)
	require.NoError(t, err)
	require.Equal(t, status.Latest-1, status.Version, "nothing was applied")

	_, err = asSuperuser.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.%s OWNER TO %s", owner, migrations.VersionTable, owner))
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, asSuperuser))
	requireUpToDate(t, asSuperuser)
}

// requireUpToDate checks that Version reports every migration applied, cleanly.
func requireUpToDate(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	status, err := migrations.Version(context.Background(), pool)
	require.NoError(t, err)
	require.Equal(t, migrations.Status{Version: status.Latest, Latest: status.Latest, Drift: []migrations.Difference{}}, status)
}

// poolInSchema is a pool of d's whose sessions search schema and, unless role is empty, act as role.
func poolInSchema(t *testing.T, d *testdb.DB, schema, role string) *pgxpool.Pool {
	t.Helper()
	return d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = schema
		if role != "" {
			c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SET ROLE "+role)
				return err
			}
		}
	})
}

// A role that may create objects in the schema (not every role: Up refuses that) defines
// functions and operators that match what the migrating session calls more exactly than
// pg_catalog's. The migrations run as the migrating role, often a superuser, and must call
// none of them, whether they install pglock, upgrade it or remove it, and even when the pool's
// search_path names pg_catalog after the schema (then a same-signature function wins too).
func TestMigrationsRunNoCodeOfRolesThatMayCreateInTheSchema(t *testing.T) {
	t.Parallel()
	up := func(ctx context.Context, pool *pgxpool.Pool) error { return migrations.Up(ctx, pool) }
	fresh := func(t *testing.T) *testdb.DB { return testdb.New(t, &testdb.Options{Unmigrated: true}) }
	for _, tc := range []struct {
		name          string
		database      func(t *testing.T) *testdb.DB
		migrate       func(ctx context.Context, pool *pgxpool.Pool) error
		pgCatalogLast bool
	}{
		{"install", fresh, up, false},
		{"install, pg_catalog searched last", fresh, up, true},
		{"already up to date", func(t *testing.T) *testdb.DB { return testdb.New(t, nil) }, up, false},
		{"upgrade from v0.1.0", func(t *testing.T) *testdb.DB {
			d := testdb.New(t, nil)
			require.NoError(t, migrations.Down(context.Background(), d.Pool, int(migrations.Latest())-1))
			return d
		}, up, false},
		{"status and repair", func(t *testing.T) *testdb.DB { return testdb.New(t, nil) }, func(ctx context.Context, pool *pgxpool.Pool) error {
			if _, err := migrations.Version(ctx, pool); err != nil {
				return err
			}
			return migrations.Repair(ctx, pool)
		}, false},
		{"remove", func(t *testing.T) *testdb.DB { return testdb.New(t, nil) }, func(ctx context.Context, pool *pgxpool.Pool) error {
			return migrations.Down(ctx, pool, migrations.AllSteps)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := tc.database(t)
			ctx := context.Background()
			plantTraps(t, d)
			pool := d.Pool
			if tc.pgCatalogLast {
				pool = d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["search_path"] = "public, pg_catalog" })
				for _, trap := range []string{"SELECT pg_advisory_lock(1::bigint)", "SELECT pg_advisory_unlock(1::bigint)", "SELECT current_database()"} {
					_, err := pool.Exec(ctx, trap)
					require.ErrorContains(t, err, "hijacked", "the trap is set: %s", trap)
				}
			}

			require.NoError(t, tc.migrate(ctx, pool))
			// A function with a SQL-standard body binds what it calls when it is created.
			var installed bool
			require.NoError(t, d.Pool.QueryRow(ctx, "SELECT to_regprocedure('pglock_advisory_key(text, text)') IS NOT NULL").Scan(&installed))
			if installed {
				_, err := d.Pool.Exec(ctx, "SELECT pglock_advisory_key('', 'name')")
				require.NoError(t, err)
			}
		})
	}
}

// Before pglock is installed, a role that may create objects in the schema makes the version
// table golang-migrate would read and write as the migrating role: a view that calls its code,
// or a table with a trigger. Up, Force and Version refuse it, and nothing is installed.
func TestMigrationsRefuseAVersionTableSomeoneElseMade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, create string }{
		{"view", `CREATE VIEW public.%s AS SELECT 5::bigint AS version, public.hijacked(0, 0) AS dirty`},
		{"table with a trigger", `CREATE TABLE public.%[1]s (version bigint PRIMARY KEY, dirty boolean NOT NULL);
			CREATE FUNCTION public.hijacked_trigger() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN PERFORM public.hijacked(0, 0); RETURN NEW; END $$;
			CREATE TRIGGER hijacked BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON public.%[1]s
				FOR EACH STATEMENT EXECUTE FUNCTION public.hijacked_trigger()`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, &testdb.Options{Unmigrated: true})
			ctx := context.Background()
			creator := plantTraps(t, d)
			_, err := d.Pool.Exec(ctx, fmt.Sprintf("SET ROLE %s; %s; RESET ROLE", creator, fmt.Sprintf(tc.create, migrations.VersionTable)))
			require.NoError(t, err)

			require.ErrorIs(t, migrations.Up(ctx, d.Pool), pglock.ErrUnsafeSchema)
			require.ErrorIs(t, migrations.Force(ctx, d.Pool, 5), pglock.ErrUnsafeSchema)
			_, err = migrations.Version(ctx, d.Pool)
			require.ErrorIs(t, err, pglock.ErrUnsafeSchema)
			require.ErrorContains(t, err, creator, "the error names who made it")
			var installed bool
			require.NoError(t, d.Pool.QueryRow(ctx, "SELECT to_regclass('distributed_locks') IS NOT NULL").Scan(&installed))
			require.False(t, installed)
		})
	}
}

// golang-migrate creates its version table when it finds none, holding its own lock. While it
// waits for that lock, a role that may create objects in the schema makes a view of that name,
// which golang-migrate then finds and keeps. Up still refuses it, and nothing is installed.
func TestUpRefusesAVersionTableMadeWhileItWaits(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	creator := plantTraps(t, d)
	key := golangMigrateLockKey(t, d.Pool)
	attacker, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer func() { // should the test stop early, closing lets go of the lock, so Up ends too
		attacker.Conn().Close(ctx)
		attacker.Release()
	}()
	_, err = attacker.Exec(ctx, "SELECT pg_advisory_lock($1::bigint)", key)
	require.NoError(t, err)

	upErr := make(chan error, 1)
	go func() { upErr <- migrations.Up(ctx, d.Pool) }()
	testdb.WaitFor(t, func() bool {
		return callBool(t, d.Pool, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND (classid::bigint << 32 | objid::bigint) = $1::bigint)`, key)
	}, "golang-migrate waits for its lock")
	// The view commits before the lock is let go: in one batch, the unlock would come first.
	_, err = attacker.Exec(ctx, fmt.Sprintf(`SET ROLE %s;
		CREATE VIEW public.%s AS SELECT 0::bigint AS version, public.hijacked(0, 0) AS dirty;
		RESET ROLE`, creator, migrations.VersionTable))
	require.NoError(t, err)
	_, err = attacker.Exec(ctx, "SELECT pg_advisory_unlock($1::bigint)", key)
	require.NoError(t, err)

	require.ErrorIs(t, <-upErr, pglock.ErrUnsafeSchema)
	var installed bool
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT to_regclass('distributed_locks') IS NOT NULL").Scan(&installed))
	require.False(t, installed)
}

// golangMigrateLockKey is the advisory lock golang-migrate holds while it works on the pool's
// schema; pglock's own migrators take the one below it first.
func golangMigrateLockKey(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var dbName, schema string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT pg_catalog.current_database(), current_schema()").Scan(&dbName, &schema))
	id, err := database.GenerateAdvisoryLockId(dbName, schema, migrations.VersionTable)
	require.NoError(t, err)
	key, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err)
	return key
}

// plantTraps makes a role that may create objects in schema public and, as that role, defines
// there functions, operators and an aggregate that raise "hijacked: ran as <role>" when called:
// closer matches than pg_catalog's for calls a migrating session could make, and, for a
// search_path that names pg_catalog last, same-signature ones. It checks that the closer
// matches are picked, and returns the role.
func plantTraps(t *testing.T, d *testdb.DB) string {
	t.Helper()
	ctx := context.Background()
	creator := d.NewRole(t, "pglock_creator")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT CREATE ON SCHEMA public TO %[1]s;
		SET ROLE %[1]s;
		CREATE FUNCTION public.hijacked(oid, integer) RETURNS boolean LANGUAGE plpgsql AS
			$$ BEGIN RAISE EXCEPTION 'hijacked: ran as %%', current_user; END $$;
		CREATE FUNCTION public.hijacked(oid, regnamespace) RETURNS boolean LANGUAGE sql AS 'SELECT public.hijacked($1, 0)';
		CREATE FUNCTION public.hijacked(oid, regprocedure) RETURNS boolean LANGUAGE sql AS 'SELECT public.hijacked($1, 0)';
		CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = integer, FUNCTION = public.hijacked);
		CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regnamespace, FUNCTION = public.hijacked);
		CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = regprocedure, FUNCTION = public.hijacked);
		CREATE FUNCTION public.format(text, name) RETURNS text LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::text';
		CREATE FUNCTION public.acldefault(text, oid) RETURNS aclitem[] LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::text::aclitem[]';
		CREATE FUNCTION public.convert_to(text, text) RETURNS bytea LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::text::bytea';
		CREATE FUNCTION public.pg_advisory_lock(text) RETURNS void LANGUAGE sql AS 'SELECT public.hijacked(0, 0)';
		CREATE FUNCTION public.pg_advisory_unlock(text) RETURNS boolean LANGUAGE sql AS 'SELECT public.hijacked(0, 0)';
		CREATE FUNCTION public.hijacked_count(bigint, integer) RETURNS bigint LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::int';
		CREATE AGGREGATE public.count(integer) (SFUNC = public.hijacked_count, STYPE = bigint, INITCOND = '0');
		CREATE FUNCTION public.pg_advisory_lock(bigint) RETURNS void LANGUAGE sql AS 'SELECT public.hijacked(0, 0)';
		CREATE FUNCTION public.pg_advisory_unlock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT public.hijacked(0, 0)';
		CREATE FUNCTION public.current_database() RETURNS name LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::text::name';
		CREATE FUNCTION public.hijacked_names(name, name) RETURNS boolean LANGUAGE sql AS 'SELECT public.hijacked(0, 0)';
		CREATE OPERATOR public.~~ (LEFTARG = name, RIGHTARG = name, FUNCTION = public.hijacked_names);
		CREATE FUNCTION public.hijacked_concat(name, name) RETURNS text LANGUAGE sql AS 'SELECT public.hijacked(0, 0)::text';
		CREATE OPERATOR public.|| (LEFTARG = name, RIGHTARG = name, FUNCTION = public.hijacked_concat);
		RESET ROLE`, creator))
	require.NoError(t, err)
	for _, trap := range []string{
		"SELECT 1259::oid = 0", "SELECT 2200::oid = 'public'::regnamespace", "SELECT 1::oid = 'now()'::regprocedure",
		"SELECT format('%I, pg_temp', current_schema())", "SELECT acldefault('n', 10)", "SELECT convert_to('x', 'UTF8')",
		"SELECT pg_advisory_lock('1')", "SELECT pg_advisory_unlock('1')", "SELECT count(1) FROM pg_class",
		"SELECT relname LIKE 'pglock%' FROM pg_class", "SELECT relname || 'x' FROM pg_class",
	} {
		_, err = d.Pool.Exec(ctx, trap)
		require.ErrorContains(t, err, "hijacked", "the trap is set: %s", trap)
	}
	return creator
}

// upFiles lists the up migrations in the order they apply.
func upFiles(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	sort.Strings(files)
	for i, f := range files {
		files[i], err = filepath.Abs(f)
		require.NoError(t, err)
	}
	return files
}

// applyByHand runs files with psql, as a DBA would.
func applyByHand(t *testing.T, url string, files []string) {
	t.Helper()
	psql := requireTool(t, "psql")
	for _, file := range files {
		out, err := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", file).CombinedOutput()
		require.NoError(t, err, "%s: %s", file, out)
	}
}

// dumpSchema is pg_dump's description of the database's schema, less lines that differ between
// any two dumps.
func dumpSchema(t *testing.T, url string, args ...string) string {
	t.Helper()
	pgDump := requireTool(t, "pg_dump")
	dump := func() ([]byte, string, error) {
		var stderr strings.Builder
		cmd := exec.Command(pgDump, append([]string{"--schema-only", "-d", url}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		return out, stderr.String(), err
	}
	out, stderr, err := dump()
	if err != nil {
		// Once, in a full run, pg_dump exited 1 with what it said unrecorded: it reads the
		// server's shared catalogs, which other tests' roles and databases change meanwhile.
		// Again once, saying why.
		t.Logf("pg_dump failed (%v), again: %s", err, stderr)
		out, stderr, err = dump()
	}
	require.NoError(t, err, "pg_dump: %s", stderr)
	var kept []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if !strings.HasPrefix(line, `\restrict`) && !strings.HasPrefix(line, `\unrestrict`) {
			kept = append(kept, line)
		}
	}
	return strings.Join(kept, "\n")
}

// schemaObjects lists the relations, functions and types of the current schema.
func schemaObjects(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'table ' || relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')
		UNION ALL SELECT 'relation ' || relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind NOT IN ('r', 'p')
			AND relname NOT LIKE $1 || '%'
		UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace
		UNION ALL SELECT 'type ' || typname FROM pg_type WHERE typnamespace = current_schema()::regnamespace
			AND typrelid = 0 AND typelem = 0
		ORDER BY 1`, migrations.VersionTable)
	require.NoError(t, err)
	defer rows.Close()
	var objects []string
	for rows.Next() {
		var o string
		require.NoError(t, rows.Scan(&o))
		objects = append(objects, o)
	}
	require.NoError(t, rows.Err())
	return objects
}

// requireTool finds a command on PATH: its absence skips the test with one line, except under
// CI=true, where it fails it.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found on PATH", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
