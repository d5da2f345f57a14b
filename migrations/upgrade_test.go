package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// releases are the versions users have installed, each by the migration it ends at: a release
// adds its line, and every path below is then tested from it too.
var releases = []struct {
	name    string
	version int
}{
	{"v0.1.0", 1},
}

// From every release, whichever way it goes, the schema ends where a fresh install of this tree
// does (pg_dump, schema only): upgraded by Up, or by psql with one file per version; and this
// tree installed, migrated down to the release and up again. Down to a release restores its
// schema exactly, functions included, as that release's own files installed it.
func TestEveryUpgradePathEndsInTheSameSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := testdb.New(t, &testdb.Options{Unmigrated: true})
	require.NoError(t, migrations.Up(ctx, fresh.Pool))
	current := dumpSchema(t, fresh.URL(), "--exclude-table="+migrations.VersionTable)
	files := upFiles(t)

	for _, release := range releases {
		t.Run(release.name, func(t *testing.T) {
			t.Parallel()
			installed := testdb.New(t, &testdb.Options{Unmigrated: true})
			applyByHand(t, installed.URL(), files[:release.version])
			asReleased := dumpSchema(t, installed.URL(), "--exclude-table="+migrations.VersionTable)

			t.Run("upgraded by Up", func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t, &testdb.Options{Unmigrated: true})
				applyByHand(t, d.URL(), files[:release.version])
				require.NoError(t, migrations.Force(ctx, d.Pool, release.version), "what psql installed, recorded")
				require.NoError(t, migrations.Up(ctx, d.Pool))
				require.Equal(t, current, dumpSchema(t, d.URL(), "--exclude-table="+migrations.VersionTable))
				requireUpToDate(t, d.Pool)
			})
			t.Run("upgraded by psql, a file per version", func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t, &testdb.Options{Unmigrated: true})
				applyByHand(t, d.URL(), files[:release.version])
				applyByHand(t, d.URL(), files[release.version:])
				require.Equal(t, current, dumpSchema(t, d.URL(), "--exclude-table="+migrations.VersionTable))
				requireUpToDate(t, d.Pool) // the files record the version they install
			})
			t.Run("installed, down to the release, and up again", func(t *testing.T) {
				t.Parallel()
				d := testdb.New(t, &testdb.Options{Unmigrated: true})
				require.NoError(t, migrations.Up(ctx, d.Pool))
				require.NoError(t, migrations.Down(ctx, d.Pool, len(files)-release.version))
				require.Equal(t, asReleased, dumpSchema(t, d.URL(), "--exclude-table="+migrations.VersionTable),
					"down to %s restores its schema and its functions exactly", release.name)
				status, err := migrations.Version(ctx, d.Pool)
				require.NoError(t, err)
				require.Equal(t, uint(release.version), status.Version)
				require.Empty(t, status.Drift, "what %s installs, as its manifest says", release.name)
				require.NoError(t, migrations.Up(ctx, d.Pool))
				require.Equal(t, current, dumpSchema(t, d.URL(), "--exclude-table="+migrations.VersionTable))
			})
		})
	}
}

// Up refuses, naming the way out and changing nothing, a schema it should not migrate.
func TestUpRefusesWhatItShouldNotMigrate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, d *testdb.DB) *pgxpool.Pool // returns the pool that migrates
		want  error
		says  []string
	}{
		{"a function edited by hand", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			execSQL(t, d.Pool, "CREATE OR REPLACE FUNCTION pglock_ttl_ok(p_ttl_ms bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT true $$")
			execSQL(t, d.Pool, "CREATE FUNCTION pglock_mine() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$")
			return d.Pool
		}, pglock.ErrSchemaDrift, []string{"function pglock_ttl_ok(p_ttl_ms bigint) changed", "function pglock_mine() unexpected", "pglockctl migrate repair"}},
		{"a table changed by hand", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			execSQL(t, d.Pool, "ALTER TABLE distributed_locks ADD COLUMN note text")
			return d.Pool
		}, pglock.ErrSchemaDrift, []string{"table distributed_locks changed", "restore tables and indexes by hand"}},
		{"v0.1.0 applied with psql, no version recorded", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			execSQL(t, d.Pool, "DROP TABLE pglock_schema_migrations")
			return d.Pool
		}, pglock.ErrSchemaDrift, []string{"holds version 1 of pglock's SQL but no version is recorded", "pglockctl migrate force 1"}},
		{"a dirty version", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			execSQL(t, d.Pool, "UPDATE pglock_schema_migrations SET dirty = true")
			return d.Pool
		}, pglock.ErrSchemaDirty, []string{"`pglockctl migrate force 0` if it went up, `force 2` if it went down"}},
		{"a version a later release installed", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			execSQL(t, d.Pool, fmt.Sprintf("UPDATE pglock_schema_migrations SET version = %d", migrations.Latest()+1))
			return d.Pool
		}, pglock.ErrSchemaTooNew, []string{fmt.Sprintf("version %d of pglock's SQL is installed", migrations.Latest()+1)}},
		{"a role that may not create objects in the schema", func(t *testing.T, d *testdb.DB) *pgxpool.Pool {
			role := d.NewRole(t, "pglock_no_create")
			execSQL(t, d.Pool, "GRANT USAGE ON SCHEMA public TO "+role)
			execSQL(t, d.Pool, "ALTER TABLE pglock_schema_migrations OWNER TO "+role)
			return poolInSchema(t, d, "public", role)
		}, pglock.ErrPermissionDenied, []string{"may not create objects in schema public: migrate as the schema's owner, or GRANT CREATE ON SCHEMA public TO pglock_no_create"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := testdb.New(t, &testdb.Options{Unmigrated: true})
			applyByHand(t, d.URL(), upFiles(t)[:1]) // v0.1.0, and Up has a version to apply
			require.NoError(t, migrations.Force(ctx, d.Pool, 1))
			pool := tc.setup(t, d)
			before := dumpSchema(t, d.URL())

			err := migrations.Up(ctx, pool)
			require.ErrorIs(t, err, tc.want)
			for _, s := range tc.says {
				require.ErrorContains(t, err, s)
			}
			require.Equal(t, before, dumpSchema(t, d.URL()), "nothing changed")
		})
	}
}

// With nothing to apply, Up changes nothing and refuses nothing: an application that calls Up at
// every start keeps starting on a drifted schema, which status reports.
func TestUpWithNothingToApplyLeavesDriftToStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.New(t, nil)
	execSQL(t, d.Pool, "CREATE INDEX mine ON distributed_locks (acquired_at)")
	require.NoError(t, migrations.Up(ctx, d.Pool))
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.Equal(t, []migrations.Difference{{Kind: "index", Name: "mine", Change: "unexpected"}}, status.Drift)
}

// Repair makes the installed version's functions again: edited, dropped or at the version's
// own body alike, and at an older version, that version's.
func TestRepairMakesTheInstalledVersionsFunctionsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, release := range releases {
		t.Run(release.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, &testdb.Options{Unmigrated: true})
			require.NoError(t, migrations.Up(ctx, d.Pool))
			require.NoError(t, migrations.Down(ctx, d.Pool, int(migrations.Latest())-release.version))
			want := dumpSchema(t, d.URL())
			execSQL(t, d.Pool, "CREATE OR REPLACE FUNCTION pglock_ttl_ok(p_ttl_ms bigint) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$ SELECT true $$")
			execSQL(t, d.Pool, "DROP FUNCTION pglock_gc()")
			status, err := migrations.Version(ctx, d.Pool)
			require.NoError(t, err)
			require.Len(t, status.Drift, 2)

			require.NoError(t, migrations.Repair(ctx, d.Pool))
			require.Equal(t, want, dumpSchema(t, d.URL()))
			status, err = migrations.Version(ctx, d.Pool)
			require.NoError(t, err)
			require.Empty(t, status.Drift)
		})
	}
	t.Run("nothing installed", func(t *testing.T) {
		t.Parallel()
		d := testdb.New(t, &testdb.Options{Unmigrated: true})
		require.ErrorIs(t, migrations.Repair(ctx, d.Pool), pglock.ErrNotMigrated)
	})
}

func execSQL(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql)
	require.NoError(t, err, sql)
}
