package tablelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
