package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/db"
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
}

// Up applies every migration not yet applied. A database already up to date is not an error.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	return run(ctx, pool, (*migrate.Migrate).Up)
}

// Down reverts the newest steps migrations, or all of them with AllSteps.
func Down(ctx context.Context, pool *pgxpool.Pool, steps int) error {
	switch {
	case steps == AllSteps:
		return run(ctx, pool, (*migrate.Migrate).Down)
	case steps > 0:
		return run(ctx, pool, func(m *migrate.Migrate) error { return m.Steps(-steps) })
	}
	return fmt.Errorf("%w: Down needs a positive number of steps or AllSteps, got %d", pglock.ErrInvalidArgument, steps)
}

// Version reports what is installed without changing anything (it creates no version table).
func Version(ctx context.Context, pool *pgxpool.Pool) (Status, error) {
	if pool == nil {
		return Status{}, fmt.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	var status Status
	row, err := db.New(db.Translating(pool)).MigrationVersion(ctx)
	switch {
	case errors.Is(err, pglock.ErrNotMigrated), errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return Status{}, fmt.Errorf("pglock: read migration version: %w", err)
	default:
		status.Version, status.Dirty = uint(row.Version), row.Dirty
	}

	src, err := iofs.New(files, ".")
	if err != nil {
		return Status{}, err
	}
	defer src.Close()
	for version, err := src.First(); err == nil; version, err = src.Next(version) {
		status.Latest = version
		if version > status.Version {
			status.Pending = append(status.Pending, upFileName(src, version))
		}
	}
	return status, nil
}

func upFileName(src source.Driver, version uint) string {
	r, identifier, err := src.ReadUp(version)
	if err != nil {
		return fmt.Sprintf("%06d (unreadable: %v)", version, err)
	}
	r.Close()
	return fmt.Sprintf("%06d_%s.up.sql", version, identifier)
}

// run hands golang-migrate a database/sql handle of its own on the pool's connection settings.
// golang-migrate waits for its advisory lock and runs its statements without a context, so the
// handle's sockets are closed when ctx ends: that is what makes those waits cancelable.
func run(ctx context.Context, pool *pgxpool.Pool, step func(*migrate.Migrate) error) (err error) {
	if pool == nil {
		return fmt.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	connConfig := pool.Config().ConnConfig
	dial := connConfig.DialFunc
	connConfig.DialFunc = func(dialCtx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(dialCtx, network, addr)
		if err == nil {
			context.AfterFunc(ctx, func() { conn.Close() })
		}
		return conn, err
	}
	sqlDB := stdlib.OpenDB(*connConfig)

	driver, err := migratepgx.WithInstance(sqlDB, &migratepgx.Config{MigrationsTable: VersionTable})
	if err != nil {
		sqlDB.Close()
		return migrateError(ctx, err)
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
	// ctx bounds the wait for the lock; golang-migrate's own limit (15 s) would fail a slow peer.
	m.LockTimeout = 24 * time.Hour

	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return migrateError(ctx, err)
	}
	return nil
}

func migrateError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("pglock: migrate: %w", context.Cause(ctx))
	}
	return fmt.Errorf("pglock: migrate: %w", err)
}
