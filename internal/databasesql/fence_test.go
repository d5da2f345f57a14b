package databasesql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

var errRollBack = errors.New("roll back")

func newAccounts(t *testing.T, d *testdb.DB) {
	t.Helper()
	_, err := d.Pool.Exec(context.Background(), `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO accounts VALUES (1, 100, 0)`)
	require.NoError(t, err)
}

func balance(t *testing.T, d *testdb.DB) int {
	t.Helper()
	return count(t, d, "SELECT balance FROM accounts WHERE id = 1")
}

// fencedWrite fences tx with fence, then writes balance with token.
func fencedWrite(ctx context.Context, tx *sql.Tx, fence func(*sql.Tx) error, token int64, balance int) error {
	if err := fence(tx); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "UPDATE accounts SET balance = $2, fence = $1 WHERE id = 1", token, balance)
	return err
}

// The holder's fenced write commits, or rolls back with its transaction, the lock held either
// way; a holder whose lease ran out while another took the lock is refused and told it lost it.
func TestFenceSQLLetsTheHolderWriteAndRefusesAStaleHolder(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newAccounts(t, d)
		stalled := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: -1}) // it stops renewing
		other := newLocker(t, d.NewPool(t, nil), nil)
		old, err := stalled.TryAcquire(ctx, "account:1", &tablelock.AcquireOptions{TTL: 500 * time.Millisecond})
		require.NoError(t, err)
		current, err := other.Acquire(ctx, "account:1", nil) // waits for the stalled lease to run out
		require.NoError(t, err)
		fence := func(tx *sql.Tx) error { return current.FenceSQL(ctx, tx) }

		require.NoError(t, inTx(ctx, sqlDB, func(tx *sql.Tx) error { return fencedWrite(ctx, tx, fence, current.Token(), 50) }))
		require.Equal(t, 50, balance(t, d))
		err = inTx(ctx, sqlDB, func(tx *sql.Tx) error {
			return errors.Join(fencedWrite(ctx, tx, fence, current.Token(), 0), errRollBack)
		})
		require.ErrorIs(t, err, errRollBack)
		require.Equal(t, 50, balance(t, d), "the rolled back write is gone")
		require.NoError(t, current.Err())

		err = inTx(ctx, sqlDB, func(tx *sql.Tx) error {
			return fencedWrite(ctx, tx, func(tx *sql.Tx) error { return old.FenceSQL(ctx, tx) }, old.Token(), 999)
		})
		require.ErrorIs(t, err, pglock.ErrLockLost)
		testdb.Receive(t, old.Lost())
		err = inTx(ctx, sqlDB, func(tx *sql.Tx) error { return tablelock.VerifyFenceSQL(ctx, tx, "account:1", old.Token()) })
		require.ErrorIs(t, err, pglock.ErrLockLost, "a stale token is refused by VerifyFenceSQL too")
		require.NoError(t, inTx(ctx, sqlDB, func(tx *sql.Tx) error { return tablelock.VerifyFenceSQL(ctx, tx, "account:1", current.Token()) }))
		require.Equal(t, 50, balance(t, d))
		require.NoError(t, current.Release(ctx))
	})
}

// A fenced transaction whose backend is killed before COMMIT writes nothing, and the lock stays
// held for the next one.
func TestFenceSQLWhoseBackendIsKilledWritesNothingAndKeepsTheLock(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newAccounts(t, d)
		lk, err := newLocker(t, d.NewPool(t, nil), nil).TryAcquire(ctx, "account:1", nil)
		require.NoError(t, err)
		fence := func(tx *sql.Tx) error { return lk.FenceSQL(ctx, tx) }

		tx, err := sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, fencedWrite(ctx, tx, fence, lk.Token(), 0))
		kill(t, ctx, d, backendOf(t, ctx, tx))
		require.Error(t, tx.Commit())
		require.Equal(t, 100, balance(t, d), "nothing of the killed transaction is written")
		require.NoError(t, lk.Err())

		require.NoError(t, inTx(ctx, sqlDB, func(tx *sql.Tx) error { return fencedWrite(ctx, tx, fence, lk.Token(), 70) }))
		require.Equal(t, 70, balance(t, d))
		require.NoError(t, lk.Release(ctx))
	})
}

// Only the leader's fenced writes land; one whose leadership was taken from it is refused.
func TestElectorFenceSQLLetsOnlyTheLeaderWrite(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newAccounts(t, d)
		e, err := leader.New(d.NewPool(t, nil), "ledger", &leader.Config{AppName: "databasesql-test"})
		require.NoError(t, err)
		fence := func(tx *sql.Tx) error { return e.FenceSQL(ctx, tx) }
		err = inTx(ctx, sqlDB, func(tx *sql.Tx) error { return fencedWrite(ctx, tx, fence, 1, 1) })
		require.ErrorIs(t, err, pglock.ErrNotHeld, "not yet elected")

		runCtx, stop := context.WithCancel(ctx)
		// Deposed, it campaigns again: room for the terms to come.
		elected, demoted := make(chan int64, 8), make(chan int64, 8)
		ran := make(chan error, 1)
		go func() {
			ran <- e.Run(runCtx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
				elected <- term
				<-ctx.Done()
			}, OnDemoted: func(term int64) { demoted <- term }})
		}()
		term := testdb.Receive(t, elected)
		require.NoError(t, inTx(ctx, sqlDB, func(tx *sql.Tx) error { return fencedWrite(ctx, tx, fence, term, 10) }))
		require.Equal(t, 10, balance(t, d))

		_, err = leader.ForceResign(ctx, d.Pool, "ledger")
		require.NoError(t, err)
		err = inTx(ctx, sqlDB, func(tx *sql.Tx) error { return fencedWrite(ctx, tx, fence, term, 20) })
		require.ErrorIs(t, err, pglock.ErrLockLost, "a deposed leader is refused")
		require.Equal(t, term, testdb.Receive(t, demoted))
		require.Equal(t, 10, balance(t, d))
		stop()
		require.NoError(t, testdb.Receive(t, ran))
	})
}
