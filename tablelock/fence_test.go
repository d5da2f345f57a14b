package tablelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// A holder that stalled past its TTL while another took the lock over can neither pass Fence nor
// overwrite, in a store that keeps the last token it accepted (docs/fencing.md), what the newer
// holder wrote.
func TestStaleHolderIsFencedOff(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
		INSERT INTO accounts VALUES (1, 100, 0)`)
	require.NoError(t, err)
	stalled := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: -1}) // it stops renewing
	other := newLocker(t, d.NewPool(t, nil), nil)

	old, err := stalled.TryAcquire(ctx, "account:1", &tablelock.AcquireOptions{TTL: 500 * time.Millisecond})
	require.NoError(t, err)
	current, err := other.Acquire(ctx, "account:1", nil) // waits for the stalled lease to run out
	require.NoError(t, err)
	require.Greater(t, current.Token(), old.Token())

	// The store's pattern: accept a write only with a token at least the last one accepted.
	write := func(token int64, balance int) int64 {
		tag, err := d.Pool.Exec(ctx, "UPDATE accounts SET balance = $2, fence = $1 WHERE id = 1 AND fence <= $1", token, balance)
		require.NoError(t, err)
		return tag.RowsAffected()
	}
	require.EqualValues(t, 1, write(current.Token(), 50))
	require.EqualValues(t, 1, write(current.Token(), 40), "the same holder may write again")
	require.EqualValues(t, 0, write(old.Token(), 999), "the stale holder's write is refused")

	// And the lock's own check, inside the writer's transaction.
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return old.Fence(ctx, tx) })
	require.ErrorIs(t, err, pglock.ErrLockLost)
	<-old.Lost()
	require.NoError(t, pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return current.Fence(ctx, tx) }))

	var balance int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 1").Scan(&balance))
	require.Equal(t, 40, balance)
	require.NoError(t, current.Release(ctx))
}

// A holder fences a transaction, writes, and then stops talking: its connection is frozen, as
// by a frozen VM or a silent partition, with the transaction open and the lock row FOR SHARE.
// PostgreSQL ends that session no later than the lease's expiry plus the lock's safety margin,
// so another instance takes the lock then, not when TCP gives up hours later, and the frozen
// write never commits.
// Every fence refused for a lost lock is told (EventFenceRefused), the loss noticed before or
// not, but for a lock its Locker's Close released: shutting down is no deposed holder writing.
func TestEveryRefusedFenceIsToldButAfterClose(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	refused := make(chan int64, 8)
	l, err := tablelock.New(d.Pool, &tablelock.Config{Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
		if e.Kind == pglock.EventFenceRefused {
			refused <- e.Token
		}
	})})
	require.NoError(t, err)
	lost, err := l.TryAcquire(ctx, "lost", nil)
	require.NoError(t, err)
	closing, err := l.TryAcquire(ctx, "closing", nil)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'lost'") // an operator's force-release
	require.NoError(t, err)
	fence := func(lk *tablelock.Lock) error {
		return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return lk.Fence(ctx, tx) })
	}
	require.ErrorIs(t, fence(lost), pglock.ErrLockLost) // noticed by this fence
	require.Equal(t, lost.Token(), testdb.Receive(t, refused))
	require.ErrorIs(t, fence(lost), pglock.ErrLockLost) // noticed before
	require.Equal(t, lost.Token(), testdb.Receive(t, refused))

	require.NoError(t, l.Close(ctx))
	require.ErrorIs(t, fence(closing), pglock.ErrClosed)
	require.ErrorIs(t, fence(lost), pglock.ErrLockLost)
	require.Equal(t, lost.Token(), testdb.Receive(t, refused), "the next refusal told is lost's, not closing's")
}

func TestFrozenFencedTransactionIsEndedSoonAfterTheLease(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, "CREATE TABLE writes (who text NOT NULL)")
	require.NoError(t, err)
	pool, partition := d.PartitionablePool(t, nil)
	const ttl, margin = 2 * time.Second, 200 * time.Millisecond // the default margin: a tenth
	lk, err := newLocker(t, pool, nil).TryAcquire(ctx, "frozen", &tablelock.AcquireOptions{TTL: ttl})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { // before the proxy stops and the pool closes, which waits for tx's connection
		rollbackCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		tx.Rollback(rollbackCtx) // behind the partition: pgx closes the connection at the deadline
	})
	require.NoError(t, lk.Fence(ctx, tx))
	// What ends the session: the fence bounds the transaction's idle time by the time left on
	// the lease plus the margin.
	var idleMs int64
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, `SELECT (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint,
		pg_backend_pid()`).Scan(&idleMs, &pid))
	require.Positive(t, idleMs)
	require.LessOrEqual(t, idleMs, (ttl + margin).Milliseconds())
	_, err = tx.Exec(ctx, "INSERT INTO writes VALUES ('frozen holder')")
	require.NoError(t, err)
	heal := partition()
	testdb.Receive(t, lk.Lost()) // the holder is told, as before

	// Within seconds (the session's idle timeout, checked above), not when TCP gives up: how
	// soon after the bound is the machine's to say, and not asserted.
	next, err := newLocker(t, d.Pool, nil).Acquire(ctx, "frozen", &tablelock.AcquireOptions{WaitTimeout: 12 * time.Second})
	require.NoError(t, err, "the frozen transaction's session was ended, and its FOR SHARE with it")
	testdb.WaitFor(t, func() bool { // its backend exits after it gave up its locks
		var alive bool
		require.NoError(t, d.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive))
		return !alive
	}, "the server ended the frozen session")

	// The client comes back and commits: too late, its session is gone with the write.
	heal()
	require.Error(t, tx.Commit(ctx))
	var frozenWrites int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM writes").Scan(&frozenWrites))
	require.Zero(t, frozenWrites, "the frozen transaction's write never commits")
	require.NoError(t, next.Release(ctx))
}

// A statement under a fence that would run past the lease and its margin is canceled, and the
// lock is free for others as soon as its holder lets go.
func TestFencedStatementThatWouldOutliveTheLeaseFails(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: -1})
	lk, err := l.TryAcquire(ctx, "slow", &tablelock.AcquireOptions{TTL: 2 * time.Second})
	require.NoError(t, err)
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		if err := lk.Fence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(5)") // the lease has 2 s left at most, the margin 200 ms
		return err
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.QueryCanceled, pgErr.Code, "statement_timeout")
	_, err = newLocker(t, d.Pool, nil).Acquire(ctx, "slow", &tablelock.AcquireOptions{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
}
