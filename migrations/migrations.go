package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/sqlfile"
)

// VersionTable is the table in which golang-migrate records the installed version.
const VersionTable = "pglock_schema_migrations"

// AllSteps makes Down remove every migration.
const AllSteps = -1

//go:embed *.sql
var files embed.FS

// FS holds the SQL files, for tools that apply them by other means.
var FS fs.FS = files

// Status describes what is installed.
type Status struct {
	Version uint     // the installed version; 0 when nothing is
	Dirty   bool     // a migration to Version started and did not finish
	Latest  uint     // the newest version these files provide
	Pending []string // up files newer than Version, in the order Up applies them

	// Drift is every object of pglock's whose definition is not what Version made: a function
	// edited by hand, an index dropped; with Version 0, every object of pglock's there is
	// (installed without recording a version). Empty when everything matches; nil, unchecked,
	// when nothing is installed, or Version is dirty or newer than Latest.
	Drift []Difference
}

// Up applies every migration not yet applied. A database already up to date is not an error.
// ctx bounds the wait for another pglock migrator, not a migration under way: stopping one
// halfway would leave the database marked dirty. Nor does it bound the wait for golang-migrate's
// own lock, which only something outside pglock holds (golang-migrate's CLI, say).
//
// Up first refuses, changing nothing, a database it should not migrate: one whose installed
// version is dirty ([pglock.ErrSchemaDirty]) or newer than these files ([pglock.ErrSchemaTooNew]);
// with migrations to apply, one that drifted from what its version made ([pglock.ErrSchemaDrift]:
// Repair mends functions), or holds pglock's objects with no version recorded (ErrSchemaDrift
// too: Force records it), and a role that may not create objects in the schema
// ([pglock.ErrPermissionDenied]).
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, readyForUp, func(m *migrate.Migrate) error { return step(m, +1, AllSteps) })
}

// readyForUp is Up's check of what is installed, made under the migration lock.
func readyForUp(ctx context.Context, conn *pgxpool.Conn) error {
	found, err := inspect(ctx, conn)
	if err != nil {
		return err
	}
	if err := found.migratable(); err != nil {
		return err
	}
	if len(found.Pending) == 0 {
		return nil // nothing to apply: drift is for status to tell
	}
	if found.Version == 0 && len(found.Drift) > 0 {
		return found.unrecordedError()
	}
	if len(found.Drift) > 0 {
		return found.driftError()
	}
	if !found.mayCreate {
		return errs.Errorf("%w: role %s may not create objects in schema %s: migrate as the schema's owner, or GRANT CREATE ON SCHEMA %s TO %s",
			pglock.ErrPermissionDenied, found.role, found.schema, found.schema, found.role)
	}
	return nil
}

// Repair makes the functions of the installed version again, in one transaction, as its
// migration made them: the way out of [pglock.ErrSchemaDrift] when functions were edited,
// dropped or replaced by hand (their edits are lost). It drops nothing, and mends no table
// or index: when those differ, it returns [pglock.ErrSchemaDrift] naming them.
func Repair(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, func(ctx context.Context, conn *pgxpool.Conn) error {
		found, err := inspect(ctx, conn)
		if err != nil {
			return err
		}
		if found.Version == 0 && !found.Dirty {
			return errs.Errorf("repair: %w", pglock.ErrNotMigrated)
		}
		if err := found.migratable(); err != nil {
			return err
		}
		statements, err := functionsOf(found.Version)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			q := db.New(db.Translating(tx))
			if err := q.SearchOnlySchema(ctx, found.schema); err != nil { // as every file starts
				return err
			}
			// SECURITY DEFINER functions are made only where no other role can shadow what they
			// call, as every migration checks (pglock.ErrUnsafeSchema).
			_, err := db.Translating(tx).Exec(ctx, statements+"SELECT pglock_check_schema_is_safe();")
			return err
		})
		if err != nil {
			return errs.Errorf("repair version %d's functions: %w", found.Version, err)
		}
		if found, err = inspect(ctx, conn); err != nil {
			return err
		}
		if len(found.Drift) > 0 {
			return found.driftError()
		}
		return nil
	}, nil)
}

// Down reverts the newest steps migrations, or all of them with AllSteps. Asking for more steps
// than are applied reverts what is applied.
func Down(ctx context.Context, pool *pgxpool.Pool, steps int) error {
	if steps <= 0 && steps != AllSteps {
		return errs.Errorf("%w: Down needs a positive number of steps or AllSteps, got %d", pglock.ErrInvalidArgument, steps)
	}
	return run(ctx, pool, nil, func(m *migrate.Migrate) error { return step(m, -1, steps) })
}

// step moves count migrations (all of them with AllSteps) in direction, +1 up or -1 down, one
// at a time: in a longer run golang-migrate reads the next file ahead, and when a file fails,
// the goroutine reading the next one blocks forever.
func step(m *migrate.Migrate, direction, count int) error {
	for done := 0; count == AllSteps || done < count; done++ {
		err := m.Steps(direction)
		if errors.Is(err, fs.ErrNotExist) { // no migration left in that direction
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Force records version as installed and clean, changing nothing else. It is the way out of a
// dirty version: each file is one transaction, so a file that failed changed nothing, and once
// its cause is fixed, Force(previous version) lets Up apply it again.
func Force(ctx context.Context, pool *pgxpool.Pool, version int) error {
	if version < 0 {
		return errs.Errorf("%w: Force needs a version of 0 or more, got %d", pglock.ErrInvalidArgument, version)
	}
	return run(ctx, pool, nil, func(m *migrate.Migrate) error {
		if version == 0 {
			return m.Force(-1) // golang-migrate's "nothing installed"
		}
		return m.Force(version)
	})
}

// Version reports what is installed, and how it differs from what its version made, without
// changing anything (it creates no version table).
func Version(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	if pool == nil {
		return Status{}, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	found, err := inspect(ctx, pool)
	return found.Status, err
}

// inspection is what inspect found: the Status, and what the migrations need to know besides.
type inspection struct {
	Status
	schema     string
	role       string
	mayCreate  bool // in schema
	unrecorded uint // with Version 0: the version whose objects are installed exactly, if any
}

// inspect reads what is installed, in one read-only transaction, so on one session: the schema
// looked at is the one read.
func inspect(ctx context.Context, conn interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}) (inspection, error) {
	found := inspection{Status: Status{Latest: Latest()}}
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := db.New(db.Translating(tx))
		scope, err := q.MigrationScope(ctx)
		if err != nil {
			return err
		}
		found.schema = scope.Schema
		exists, err := trustVersionTable(ctx, q, scope.Schema)
		if err != nil {
			return err
		}
		if err := q.SearchOnlySchema(ctx, scope.Schema); err != nil {
			return err
		}
		privilege, err := q.MayCreateIn(ctx, scope.Schema)
		if err != nil {
			return err
		}
		found.role, found.mayCreate = privilege.Role, privilege.MayCreate
		if exists {
			row, err := q.MigrationVersion(ctx)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				return err
			case row.Version >= 0: // golang-migrate writes -1 for "none" when a down to 0 fails
				found.Version, found.Dirty = uint(row.Version), row.Dirty
			default:
				found.Dirty = row.Dirty
			}
		}
		return found.compare(ctx, q)
	})
	if err != nil {
		return inspection{}, errs.Errorf("read migration version: %w", err)
	}

	err = eachVersion(func(src source.Driver, version uint) {
		// A dirty version did not finish: it is pending too.
		if version > found.Version || (found.Dirty && version == found.Version) {
			found.Pending = append(found.Pending, upFileName(src, version))
		}
	})
	return found, err
}

// compare reads pglock's objects into found.Drift, against what found.Version made: unless
// that version is dirty or unknown here, and unless nothing at all is installed.
func (found *inspection) compare(ctx context.Context, q *db.Queries) error {
	if found.Dirty || found.Version > found.Latest {
		return nil
	}
	live, err := installed(ctx, q, found.schema)
	if err != nil || (found.Version == 0 && len(live) == 0) {
		return err
	}
	if found.Version > 0 {
		found.Drift, err = drift(found.Version, live)
		return err
	}
	for version := uint(1); version <= found.Latest && found.unrecorded == 0; version++ {
		if differences, err := drift(version, live); err == nil && len(differences) == 0 {
			found.unrecorded = version
		}
	}
	found.Drift, err = drift(0, live) // every object unexpected
	return err
}

// migratable refuses a version these files cannot take further: a dirty one, or a newer one.
func (found inspection) migratable() error {
	switch {
	case found.Version > found.Latest:
		return errs.Errorf("%w: version %d of pglock's SQL is installed, and this module's newest is %d (a later release installed it): use that release, or migrate down with it first",
			pglock.ErrSchemaTooNew, found.Version, found.Latest)
	case found.Dirty && found.Version == 0:
		return errs.Errorf("%w: a migration failed and changed nothing (each file is one transaction): fix its cause, then record what is installed, `pglockctl migrate force 0` if the first up failed, `force 1` if the down from 1 did (migrations.Force), and migrate again",
			pglock.ErrSchemaDirty)
	case found.Dirty:
		// golang-migrate marks the version it was going to, up or down.
		return errs.Errorf("%w: a migration to version %d failed and changed nothing (each file is one transaction): fix its cause, then record what is installed, `pglockctl migrate force %d` if it went up, `force %d` if it went down (migrations.Force), and migrate again",
			pglock.ErrSchemaDirty, found.Version, found.Version-1, found.Version+1)
	}
	return nil
}

// unrecordedError says that pglock's objects are there with no version recorded, and which.
func (found inspection) unrecordedError() error {
	if found.unrecorded == 0 {
		return errs.Errorf("%w: schema %s holds pglock's objects (%s, …) but no version is recorded, and they match no version of these files: `pglockctl migrate status` lists them",
			pglock.ErrSchemaDrift, found.schema, found.Drift[0].Name)
	}
	return errs.Errorf("%w: schema %s holds version %d of pglock's SQL but no version is recorded (applied with psql?): record it with `pglockctl migrate force %d` (migrations.Force), then migrate up",
		pglock.ErrSchemaDrift, found.schema, found.unrecorded, found.unrecorded)
}

// driftError names what differs (the first ten of them) and the way out.
func (found inspection) driftError() error {
	names := make([]string, 0, len(found.Drift))
	functionsOnly := true
	for i, d := range found.Drift {
		if d.Kind != "function" || d.Change == "unexpected" {
			functionsOnly = false
		}
		if i < 10 {
			names = append(names, d.String())
		}
	}
	if len(found.Drift) > len(names) {
		names = append(names, fmt.Sprintf("and %d more", len(found.Drift)-len(names)))
	}
	fix := "`pglockctl migrate repair` (migrations.Repair) makes the version's functions again; drop unexpected functions that are not yours, and restore tables and indexes by hand (docs/sql.md, Drift)"
	if functionsOnly {
		fix = "`pglockctl migrate repair` (migrations.Repair) makes them again as the version made them"
	}
	return errs.Errorf("%w: version %d in schema %s: %s: %s", pglock.ErrSchemaDrift, found.Version, found.schema, strings.Join(names, ", "), fix)
}

// functionsOf is what makes version's functions again: the statements of its up file that make
// a function or say who may call it, made with CREATE OR REPLACE (sqlfile.Functions).
func functionsOf(version uint) (string, error) {
	src, err := iofs.New(files, ".")
	if err != nil {
		return "", err
	}
	defer src.Close()
	r, _, err := src.ReadUp(version)
	if err != nil {
		return "", errs.Errorf("version %d's up file: %w", version, err)
	}
	defer r.Close()
	text, err := io.ReadAll(r)
	if err != nil {
		return "", err
	}
	functions, err := sqlfile.Functions(string(text))
	if err != nil {
		return "", errs.Errorf("version %d's up file: %w", version, err)
	}
	return functions, nil
}

// Latest is the newest version these files provide.
func Latest() uint {
	var latest uint
	eachVersion(func(_ source.Driver, version uint) { latest = version }) // embedded: cannot fail
	return latest
}

// eachVersion calls fn with every version the files provide, oldest first.
func eachVersion(fn func(src source.Driver, version uint)) error {
	src, err := iofs.New(files, ".")
	if err != nil {
		return err
	}
	defer src.Close()
	for version, err := src.First(); err == nil; version, err = src.Next(version) {
		fn(src, version)
	}
	return nil
}

func upFileName(src source.Driver, version uint) string {
	r, identifier, err := src.ReadUp(version)
	if err != nil {
		return fmt.Sprintf("%06d (unreadable: %v)", version, err)
	}
	r.Close()
	return fmt.Sprintf("%06d_%s.up.sql", version, identifier)
}

// run takes pglock's own migration lock for the pool's schema, waiting as long as ctx allows,
// then lets golang-migrate work without a context. golang-migrate waits for its advisory lock
// and runs the files with no way to cancel either; with ours held first, its lock is free
// whenever only pglock migrates, and a canceled wait ends on our connection, not in a file.
//
// before, if not nil, runs first under the lock, on its connection, and can refuse; apply nil
// runs before alone.
func run(ctx context.Context, pool *pgxpool.Pool, before func(context.Context, *pgxpool.Conn) error, apply func(*migrate.Migrate) error) (err error) {
	if pool == nil {
		return errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return errs.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	q := db.New(db.Translating(conn))
	scope, err := q.MigrationScope(ctx)
	if err != nil {
		return errs.Errorf("migrate: %w", err)
	}
	key, err := migrationLockKey(scope)
	if err != nil {
		return err
	}
	if err := q.LockMigrations(ctx, key); err != nil {
		return errs.Errorf("migrate: wait for another migrator: %w", err)
	}
	defer func() {
		if unlockErr := q.UnlockMigrations(context.WithoutCancel(ctx), key); unlockErr != nil && err == nil {
			err = errs.Errorf("migrate: %w", unlockErr)
		}
	}()
	if before != nil {
		if err := before(ctx, conn); err != nil {
			return err
		}
	}
	if apply == nil {
		return nil
	}

	// golang-migrate speaks database/sql; give it connections of its own, made as the pool makes
	// them, so it takes none of the pool's, then confined to pg_catalog (ConfineMigrator).
	config := pool.Config()
	var hooks []stdlib.OptionOpenDB
	if config.BeforeConnect != nil {
		hooks = append(hooks, stdlib.OptionBeforeConnect(config.BeforeConnect))
	}
	var (
		openedMu sync.Mutex
		opened   []*pgx.Conn
	)
	hooks = append(hooks, stdlib.OptionAfterConnect(func(ctx context.Context, migratorConn *pgx.Conn) error {
		openedMu.Lock()
		opened = append(opened, migratorConn)
		openedMu.Unlock()
		if config.AfterConnect != nil {
			if err := config.AfterConnect(ctx, migratorConn); err != nil {
				return err
			}
		}
		return db.New(migratorConn).ConfineMigrator(ctx, scope.Schema)
	}))
	sqlDB := stdlib.OpenDB(*config.ConnConfig, hooks...)
	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{
		MigrationsTable: VersionTable, DatabaseName: scope.Database, SchemaName: scope.Schema,
	})
	if err != nil {
		// A failed WithInstance does not give back the connection it took, and sqlDB.Close
		// leaves a connection in use open: close them all under it.
		sqlDB.Close()
		openedMu.Lock()
		for _, migratorConn := range opened {
			migratorConn.Close(ctx)
		}
		openedMu.Unlock()
		return errs.Errorf("migrate: %w", err)
	}
	// Only now: golang-migrate made the version table if it found none, and keeps one that
	// another role made while it waited for its own lock. Either is there to stay: no role but
	// its owner could drop, replace or alter it.
	if _, err := trustVersionTable(ctx, q, scope.Schema); err != nil {
		driver.Close()
		return errs.Errorf("migrate: %w", err)
	}
	src, err := iofs.New(files, ".")
	if err != nil {
		driver.Close()
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		src.Close()
		driver.Close()
		return err
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()
	if err := apply(m); err != nil {
		// golang-migrate's error quotes the whole file; the database's error says what failed.
		var failed database.Error
		if errors.As(err, &failed) && failed.OrigErr != nil {
			err = db.Translate(failed.OrigErr)
		}
		return errs.Errorf("migrate: %w", err)
	}
	return nil
}

// migrationLockKey is golang-migrate's key for the schema's version table, less one: ours
// must differ from the one golang-migrate takes after it.
func migrationLockKey(scope db.MigrationScopeRow) (int64, error) {
	id, err := database.GenerateAdvisoryLockId(scope.Database, scope.Schema, VersionTable)
	if err != nil {
		return 0, err
	}
	key, err := strconv.ParseInt(id, 10, 64)
	return key - 1, err
}

// trustVersionTable says whether schema has a version table, and refuses one that golang-migrate
// should not read or write as the migrating role (queries/migrations.sql, VersionTableTrust).
func trustVersionTable(ctx context.Context, q *db.Queries, schema string) (exists bool, err error) {
	table, err := q.VersionTableTrust(ctx, db.VersionTableTrustParams{Schema: schema, TableName: VersionTable})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, errs.Errorf("inspect %s: %w", VersionTable, err)
	case !table.Trusted:
		return true, errs.Errorf("%w: %s.%s belongs to %s, which is neither the current role nor has the rights of schema %s's owner, or it is not a plain table: migrate as its owner, hand it to the schema's owner (ALTER TABLE ... OWNER TO), or drop it if it is not pglock's",
			pglock.ErrUnsafeSchema, schema, VersionTable, table.Owner, schema)
	}
	return true, nil
}
