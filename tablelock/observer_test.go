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

// An Observer that blocks, or panics, on every event holds nothing up: locks are still
// acquired, handed over and renewed, and none is lost.
func TestAStuckOrPanickingObserverDelaysNoRenewalOrHandoff(t *testing.T) {
	t.Parallel()
	for name, observe := range map[string]func(unblock <-chan struct{}) pglock.ObserverFunc{
		"blocking": func(unblock <-chan struct{}) pglock.ObserverFunc {
			return func(context.Context, pglock.Event) { <-unblock }
		},
		"panicking": func(<-chan struct{}) pglock.ObserverFunc {
			return func(context.Context, pglock.Event) { panic("observer bug") }
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			ctx := testdb.Context(t)
			unblock := make(chan struct{})
			defer close(unblock) // before the Lockers close: nothing of theirs waits for it
			// Renewed every 200 ms, with seconds of room: a busy machine slows renewals down, and
			// only an Observer that held them up would lose the lock.
			cfg := &tablelock.Config{TTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, Observer: observe(unblock)}
			a, b := newLocker(t, d.Pool, cfg), newLocker(t, d.NewPool(t, nil), cfg)

			held, err := a.TryAcquire(ctx, "observed", nil)
			require.NoError(t, err)
			first := held.ExpiresAt()
			// Renewed again and again, every 200 ms, though every event blocks or panics.
			renewedPast(t, held, first.Add(time.Second))
			require.NoError(t, held.Err())

			waiting := make(chan *tablelock.Lock, 1)
			go func() {
				lk, err := b.Acquire(ctx, "observed", nil)
				if err == nil {
					waiting <- lk
				}
				close(waiting)
			}()
			testdb.WaitFor(t, func() bool { return b.Stats().Waiting == 1 }, "queued")
			require.NoError(t, held.Release(ctx))
			next, ok := <-waiting
			require.True(t, ok, "handed over")
			require.Greater(t, next.Token(), held.Token())
			require.NoError(t, next.Release(ctx))
		})
	}
}
