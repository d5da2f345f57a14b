package databasesql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	_ "github.com/lib/pq"              // registers "postgres"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// drivers are the PostgreSQL drivers every database/sql form is tested with, by the names
// they register with database/sql.
var drivers = []string{"pgx", "postgres"}

// forEachDriver runs test once per driver, in parallel, each on a database of its own reached
// both by a pgx pool (d.Pool) and by database/sql through the driver.
func forEachDriver(t *testing.T, test func(t *testing.T, d *testdb.DB, sqlDB *sql.DB)) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			test(t, d, openDB(t, driver, d.URL()))
		})
	}
}

func openDB(t *testing.T, driver, url string) *sql.DB {
	t.Helper()
	sqlDB, err := sql.Open(driver, url)
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })
	return sqlDB
}

func newLocker(t *testing.T, pool *pgxpool.Pool, cfg *tablelock.Config) *tablelock.Locker {
	t.Helper()
	if cfg == nil {
		cfg = &tablelock.Config{}
	}
	cfg.AppName = "databasesql-test"
	l, err := tablelock.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	return l
}

// inTx runs fn in a transaction of sqlDB and commits, or rolls back if fn fails.
func inTx(ctx context.Context, sqlDB *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// backendOf is the PID of the server process serving tx.
func backendOf(t *testing.T, ctx context.Context, tx *sql.Tx) int {
	t.Helper()
	var pid int
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// kill terminates the backend pid, and waits for it to be gone.
func kill(t *testing.T, ctx context.Context, d *testdb.DB, pid int) {
	t.Helper()
	var killed bool
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", pid).Scan(&killed))
	require.True(t, killed)
}

func count(t *testing.T, d *testdb.DB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, d.Pool.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}
