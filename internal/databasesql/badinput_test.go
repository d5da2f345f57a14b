package databasesql_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/mattn/go-sqlite3" // registers "sqlite3": a driver that is not PostgreSQL's
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

// Each database/sql form refuses a nil transaction, one already committed or rolled back, and one
// on a server that is not PostgreSQL (naming it), with an error matching
// pglock.ErrInvalidArgument, and writes nothing.
func TestSQLFormsRefuseATransactionTheyCannotUse(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	lk, err := newLocker(t, d.NewPool(t, nil), nil).TryAcquire(ctx, "account:1", nil)
	require.NoError(t, err)
	e, err := leader.New(d.Pool, "ledger", nil)
	require.NoError(t, err)
	dd := newDeduper(t, d)
	key := advisory.StringKey("k")
	forms := map[string]func(*sql.Tx) error{
		"Lock.FenceSQL":    func(tx *sql.Tx) error { return lk.FenceSQL(ctx, tx) },
		"VerifyFenceSQL":   func(tx *sql.Tx) error { return tablelock.VerifyFenceSQL(ctx, tx, "account:1", lk.Token()) },
		"XactLockSQL":      func(tx *sql.Tx) error { return advisory.XactLockSQL(ctx, tx, key) },
		"RXactLockSQL":     func(tx *sql.Tx) error { return advisory.RXactLockSQL(ctx, tx, key) },
		"TryXactLockSQL":   func(tx *sql.Tx) error { return advisory.TryXactLockSQL(ctx, tx, key) },
		"TryRXactLockSQL":  func(tx *sql.Tx) error { return advisory.TryRXactLockSQL(ctx, tx, key) },
		"Elector.FenceSQL": func(tx *sql.Tx) error { return e.FenceSQL(ctx, tx) },
	}
	postgres := openDB(t, "pgx", d.URL())
	sqlite := openDB(t, "sqlite3", "file:"+t.TempDir()+"/other.db")
	done, err := postgres.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, done.Commit())

	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, form(nil), pglock.ErrInvalidArgument)
			err := form(done) // Elector.FenceSQL too, though it does not lead
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			require.ErrorIs(t, err, sql.ErrTxDone)

			tx, err := sqlite.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback()
			err = form(tx)
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			require.ErrorContains(t, err, "not PostgreSQL")
			require.ErrorContains(t, err, "sqlite3.Error", "the error names the driver found")
		})
	}
	require.NoError(t, lk.Err(), "the lock was never touched")

	_, err = dd.RunTxSQL(ctx, nil, "k", nil, insertEffect("k"))
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = dd.RunTxSQL(ctx, postgres, "k", nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = dd.RunTxSQL(ctx, sqlite, "k", nil, func(context.Context, *sql.Tx) error {
		t.Error("fn ran on a database that is not PostgreSQL")
		return nil
	})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	require.ErrorContains(t, err, "not PostgreSQL")
	require.Zero(t, count(t, d, "SELECT count(*) FROM pglock_jobs"), "nothing was written")
	require.Equal(t, 1, count(t, d, "SELECT count(*) FROM distributed_locks"))
}
