package db_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/db"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

func TestTranslateArgumentErrors(t *testing.T) {
	t.Parallel()
	q := db.New(db.Translating(testdb.New(t, nil).Pool))
	ctx := context.Background()

	tests := []struct {
		name string
		arg  db.TryAcquireLockParams
		want error
		code string
	}{
		{"empty name", db.TryAcquireLockParams{LockName: "", HolderID: "h", TtlMs: 1000}, pglock.ErrInvalidName, "22023"},
		{"long name", db.TryAcquireLockParams{LockName: strings.Repeat("n", 256), HolderID: "h", TtlMs: 1000}, pglock.ErrInvalidName, "22023"},
		{"zero TTL", db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 0}, pglock.ErrInvalidTTL, "22023"},
		{"empty holder", db.TryAcquireLockParams{LockName: "n", HolderID: "", TtlMs: 1000}, pglock.ErrInvalidArgument, "22023"},
		{"metadata not an object", db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000, Metadata: []byte(`"x"`)}, pglock.ErrInvalidArgument, "22023"},
		// Refused by the types themselves, before any function runs.
		{"metadata with NUL", db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000, Metadata: []byte(`{"k": "\u0000"}`)}, pglock.ErrInvalidArgument, "22P05"},
		{"metadata with a lone surrogate", db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000, Metadata: []byte(`{"k": "\ud800"}`)}, pglock.ErrInvalidArgument, "22P02"},
		{"instance not UTF-8", db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000, Instance: "bad\xc3\x28"}, pglock.ErrInvalidArgument, "22021"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := q.TryAcquireLock(ctx, tt.arg)
			require.ErrorIs(t, err, tt.want)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "the PostgreSQL error stays reachable")
			require.Equal(t, tt.code, pgErr.Code)
		})
	}
}

func TestTranslateUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, &testdb.Options{Unmigrated: true}).Pool
	q := db.New(db.Translating(pool))
	ctx := context.Background()

	_, err := q.TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000})
	require.ErrorIs(t, err, pglock.ErrNotMigrated, "missing function")
	require.Contains(t, err.Error(), "pglockctl migrate up")

	_, err = q.MigrationVersion(ctx)
	require.ErrorIs(t, err, pglock.ErrNotMigrated, "missing table")

	rows, err := db.Translating(pool).Query(ctx, "SELECT lock_name FROM distributed_locks")
	require.Nil(t, rows)
	require.ErrorIs(t, err, pglock.ErrNotMigrated, "Query translates too")
}

// An application newer than the schema it meets (a migration not yet applied) is told to migrate.
// An application newer than its schema meets a pglock type that is missing, in whatever language
// the server speaks (.ci/run generates these locales; so can localedef --no-archive, without
// restarting the server).
func TestTranslateOlderSchema(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, d.Pool))
	const beforeAttempt = 4 // 000005 added the pglock_acquisition type TryAcquireLock casts to
	require.NoError(t, migrations.Down(ctx, d.Pool, int(migrations.Latest()-beforeAttempt)))

	for _, language := range []string{"C", "de_DE.UTF-8", "ja_JP.UTF-8"} {
		t.Run(language, func(t *testing.T) {
			pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["lc_messages"] = language })
			require.NoError(t, pool.Ping(ctx), "is the %s locale installed? .ci/run generates it", language)
			_, err := db.New(db.Translating(pool)).TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000})
			require.ErrorIs(t, err, pglock.ErrNotMigrated)
			require.Contains(t, err.Error(), "pglockctl migrate up")
		})
	}
}

func TestEveryPglockTypeIsKnown(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	// The schema's own types: neither a table's row type nor an array type.
	rows, err := pool.Query(context.Background(), `SELECT t.typname::text FROM pg_type t
		LEFT JOIN pg_class c ON c.oid = t.typrelid
		WHERE t.typnamespace = current_schema()::regnamespace AND t.typcategory <> 'A'
		  AND coalesce(c.relkind, 'c') = 'c'
		ORDER BY 1`)
	require.NoError(t, err)
	created, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, created, db.PglockTypes, "Translate must know every type, to say to migrate when one is missing")
}

func TestTranslateLeavesOtherErrorsAloneAndCoversRows(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	q := db.New(db.Translating(pool))
	ctx := context.Background()

	_, err := q.ExtendLock(ctx, db.ExtendLockParams{LockName: "never-held", HolderID: "h", TtlMs: 1000})
	require.ErrorIs(t, err, pgx.ErrNoRows, "extending a lock not held returns no row")

	for sql, code := range map[string]string{
		"SELECT 1/0":        "22012",
		"SHOW no_such_knob": "42704", // undefined_object, as a missing pglock type is, but not that
	} {
		_, err = db.Translating(pool).Exec(ctx, sql)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr))
		require.Equal(t, code, pgErr.Code)
		for _, sentinel := range []error{pglock.ErrNotMigrated, pglock.ErrInvalidArgument, pglock.ErrInvalidName, pglock.ErrInvalidTTL} {
			require.NotErrorIs(t, err, sentinel, sql)
		}
	}

	// An error raised while rows are read is translated too.
	rows, err := db.Translating(pool).Query(ctx,
		"SELECT n, CASE WHEN n = 3 THEN acquire_lock('', 'h', 1) END FROM generate_series(1, 3) n")
	require.NoError(t, err)
	for rows.Next() {
	}
	require.ErrorIs(t, rows.Err(), pglock.ErrInvalidName)
	rows.Close()
}
