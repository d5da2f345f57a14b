package tablelock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// Past what its pool and database can renew, a Locker keeps the locks it holds first: while
// renewals are more than half a heartbeat behind, it says so (Stats, EventRenewalLag) and new
// acquisitions fail with ErrSaturated, before any lock is lost; once they catch up,
// acquisitions resume. Forced with a pool of two connections behind a proxy that delays
// every round trip by 0.8 s, against a heartbeat of 1 s.
func TestASaturatedLockerKeepsWhatItHoldsAndRefusesNewLocks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	pool, proxy := d.ProxiedPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 })
	var (
		mu   sync.Mutex
		lags []pglock.Event
	)
	// A heartbeat of 1 s (saturated once renewals lag half of it) in a TTL of 6 s: room for the
	// slowed renewals to lag well past that on a loaded machine without a lease running out.
	l := newLocker(t, pool, &tablelock.Config{TTL: 6 * time.Second, HeartbeatInterval: time.Second, Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
		if e.Kind == pglock.EventRenewalLag {
			mu.Lock()
			lags = append(lags, e)
			mu.Unlock()
		}
	})})
	var held []*tablelock.Lock
	for i := range 50 {
		held = append(held, tryAcquireCaughtUp(t, l, fmt.Sprintf("held-%d", i)))
	}
	testdb.WaitFor(t, func() bool { return !l.Stats().Saturated }, "renewals on time before the slowing")

	undo, err := proxy.Slow(400, 0)
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool { return l.Stats().Saturated }, "renewals fall behind")
	stats := l.Stats()
	require.Greater(t, stats.RenewalLag, 500*time.Millisecond, "half the heartbeat")
	require.Equal(t, 50, stats.Held)
	_, err = l.TryAcquire(ctx, "new", nil)
	require.ErrorIs(t, err, pglock.ErrSaturated)
	_, err = l.Acquire(ctx, "new", nil)
	require.ErrorIs(t, err, pglock.ErrSaturated)
	testdb.WaitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lags) > 0
	}, "the lag is told to the Observer")

	require.NoError(t, undo())
	testdb.WaitFor(t, func() bool { return !l.Stats().Saturated }, "renewals catch up")
	testdb.WaitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return lags[len(lags)-1].Outcome == pglock.OutcomeAcquired
	}, "and the Observer is told they have")
	// Acquisitions resume: at once on an idle machine; on a busy one a late tick may count as
	// saturated again for a moment.
	lk := tryAcquireCaughtUp(t, l, "new")
	require.NoError(t, lk.Release(ctx))

	mu.Lock()
	first := lags[0]
	mu.Unlock()
	require.Equal(t, pglock.OutcomeError, first.Outcome)
	require.Greater(t, first.Lag, 500*time.Millisecond)
	require.Equal(t, int64(50), first.Count)
	for _, lk := range held {
		require.NoError(t, lk.Err(), "no lock was lost")
		require.NoError(t, lk.Release(ctx))
	}
}

// tryAcquireCaughtUp is l.TryAcquire of name, tried again while l refuses it as saturated: a
// busy machine can put renewals half a heartbeat behind for a moment, and l takes no new lock
// until they catch up.
func tryAcquireCaughtUp(t *testing.T, l *tablelock.Locker, name string) *tablelock.Lock {
	t.Helper()
	var lk *tablelock.Lock
	testdb.WaitFor(t, func() bool {
		var err error
		lk, err = l.TryAcquire(testdb.Context(t), name, nil)
		if errors.Is(err, pglock.ErrSaturated) {
			return false
		}
		require.NoError(t, err)
		return true
	}, "%s acquired once renewals caught up", name)
	return lk
}
