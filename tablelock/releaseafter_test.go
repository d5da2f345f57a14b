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

// ReleaseAfter keeps the lock, unrenewed, until it has been held that long since its
// acquisition by the database's clock, even once its holder's Locker is closed; the next
// acquirer then takes it. A lock held that long already goes at once, to the first waiter. A
// time held that is not positive is refused and changes nothing.
func TestReleaseAfterKeepsTheLockUntilHeldThatLong(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	holder, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{AppName: "tablelock-test"})
	require.NoError(t, err)
	other := newLocker(t, d.NewPool(t, nil), nil)

	lk, err := holder.TryAcquire(ctx, "report", &tablelock.AcquireOptions{TTL: 3 * time.Second})
	require.NoError(t, err)
	for _, held := range []time.Duration{0, -time.Second} {
		require.ErrorIs(t, lk.ReleaseAfter(ctx, held), pglock.ErrInvalidArgument)
	}
	require.NoError(t, lk.Err(), "a refused ReleaseAfter leaves the lock held")
	require.NoError(t, lk.ReleaseAfter(ctx, 6*time.Second))
	require.ErrorIs(t, lk.Release(ctx), pglock.ErrNotHeld, "released already")
	require.NoError(t, holder.Close(ctx), "its process ends")

	var heldFor time.Duration
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT expires_at - acquired_at FROM distributed_locks WHERE lock_name = 'report'").Scan(&heldFor))
	require.Equal(t, 6*time.Second, heldFor, "the lease ends six seconds after the acquisition, past its three-second TTL")
	_, err = other.TryAcquire(ctx, "report", nil)
	require.ErrorIs(t, err, pglock.ErrLocked)
	next, err := other.Acquire(ctx, "report", nil) // taken once the hold ends
	require.NoError(t, err)
	require.NoError(t, lk.Err(), "never lost")

	waiter := acquireQueued(t, newLocker(t, d.NewPool(t, nil), nil), d.Pool, "report", nil)
	require.NoError(t, next.ReleaseAfter(ctx, time.Millisecond))
	require.NoError(t, testdb.Receive(t, waiter).Release(ctx))
}
