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
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
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

// Whatever language the server speaks, an unmigrated database is told to migrate and a bad
// argument is named: both are read from the SQLSTATE and the fields the contract sets, never
// from the message (.ci/run generates these locales; so can localedef --no-archive, without
// restarting the server).
func TestTranslateInEveryLanguage(t *testing.T) {
	t.Parallel()
	unmigrated := testdb.New(t, &testdb.Options{Unmigrated: true})
	migrated := testdb.New(t, nil)
	ctx := context.Background()
	for _, language := range []string{"C", "de_DE.UTF-8", "ja_JP.UTF-8"} {
		t.Run(language, func(t *testing.T) {
			speaking := func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["lc_messages"] = language }
			pool := unmigrated.NewPool(t, speaking)
			require.NoError(t, pool.Ping(ctx), "is the %s locale installed? .ci/run generates it", language)
			_, err := db.New(db.Translating(pool)).TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 1000})
			require.ErrorIs(t, err, pglock.ErrNotMigrated)
			require.Contains(t, err.Error(), "pglockctl migrate up")

			_, err = db.New(db.Translating(migrated.NewPool(t, speaking))).TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "n", HolderID: "h", TtlMs: 0})
			require.ErrorIs(t, err, pglock.ErrInvalidTTL)
		})
	}
}

func TestTranslateLeavesOtherErrorsAloneAndCoversRows(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	q := db.New(db.Translating(pool))
	ctx := context.Background()

	_, err := q.GetCronRun(ctx, -1)
	require.ErrorIs(t, err, pgx.ErrNoRows, "reading a run that does not exist returns no row")

	for sql, code := range map[string]string{
		"SELECT 1/0":        "22012",
		"SHOW no_such_knob": "42704", // undefined_object: nothing of pglock's is missing
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
