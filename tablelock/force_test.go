package tablelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// ForceRelease ends the holding it names, which its holder is told, and refuses, doing nothing,
// what it should not release: another holding than the token it names, a free lock, bad input.
func TestForceReleaseEndsOnlyTheHoldingItNames(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: 200 * time.Millisecond})
	lk, err := l.TryAcquire(ctx, "stuck", nil)
	require.NoError(t, err)
	heldToken := func() (token int64) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT coalesce(max(fencing_token), 0) FROM distributed_locks WHERE lock_name = 'stuck'`).Scan(&token))
		return token
	}

	_, err = tablelock.ForceRelease(ctx, d.Pool, "stuck", &tablelock.ForceReleaseOptions{Token: lk.Token() + 1})
	require.ErrorIs(t, err, pglock.ErrLocked, "another holding than the one named")
	require.Equal(t, lk.Token(), heldToken(), "nothing was done")

	released, err := tablelock.ForceRelease(ctx, d.Pool, "stuck", &tablelock.ForceReleaseOptions{Token: lk.Token()})
	require.NoError(t, err)
	require.Equal(t, lk.Token(), released.Token)
	require.False(t, released.HandedOff, "nobody waited")
	require.Zero(t, heldToken())
	testdb.Receive(t, lk.Lost())
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
	require.Equal(t, pglock.CauseForceReleased, pglock.CauseOf(lk.Err()))

	_, err = tablelock.ForceRelease(ctx, d.Pool, "stuck", nil)
	require.ErrorIs(t, err, pglock.ErrNotHeld, "a free lock")
	_, err = tablelock.ForceRelease(ctx, d.Pool, "stuck", &tablelock.ForceReleaseOptions{Token: lk.Token()})
	require.ErrorIs(t, err, pglock.ErrNotHeld, "the holding named, released meanwhile")
	_, err = tablelock.ForceRelease(ctx, d.Pool, "stuck", &tablelock.ForceReleaseOptions{Token: -1})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = tablelock.ForceRelease(ctx, d.Pool, "", nil)
	require.ErrorIs(t, err, pglock.ErrInvalidName)
	_, err = tablelock.ForceRelease(ctx, nil, "stuck", nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
}

// A lock with a waiter is handed to it, with a higher token, when its holding is force-released.
func TestForceReleaseHandsTheLockToTheNextWaiter(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	held, err := newLocker(t, d.Pool, nil).TryAcquire(ctx, "stuck", nil)
	require.NoError(t, err)
	waiter := newLocker(t, d.NewPool(t, nil), nil)
	acquired := make(chan *tablelock.Lock, 1)
	go func() {
		lk, err := waiter.Acquire(ctx, "stuck", nil)
		if err == nil {
			acquired <- lk
		}
	}()
	waitForQueue(t, d.Pool, 1)

	released, err := tablelock.ForceRelease(ctx, d.Pool, "stuck", nil)
	require.NoError(t, err)
	require.True(t, released.HandedOff)
	require.Equal(t, held.Token(), released.Token)
	require.Greater(t, testdb.Receive(t, acquired).Token(), held.Token())
}
