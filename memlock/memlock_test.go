package memlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/locktest"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/memlock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestConformance(t *testing.T) {
	t.Parallel()
	var lockers sync.Map // each subtest's Locker
	locker := func(t *testing.T) *memlock.Locker {
		l, err := memlock.New(&memlock.Config{TTL: time.Second})
		require.NoError(t, err)
		actual, _ := lockers.LoadOrStore(t, l)
		return actual.(*memlock.Locker)
	}
	locktest.Run(t, locktest.Subject{
		// In memory: its tokens start over with the process.
		Capabilities: locktest.Capabilities{Fencing: true, Fairness: true, LossSignal: true},
		New: func(t *testing.T) (pglock.Locker, pglock.Locker) {
			l := locker(t) // one process: both instances share the Locker
			return l, l
		},
		ForceRelease: func(t *testing.T, name string) { require.True(t, locker(t).ForceRelease(name)) },
		Waiting:      func(t *testing.T, name string) int { return locker(t).Waiting(name) },
	})
}

// On a driven clock: heartbeats keep a lock past its TTL; a partition makes the holder declare it
// lost a tenth of the TTL before it expires, and the waiter gets it at the expiry.
func TestPartitionLosesTheLockBeforeItExpiresOnADrivenClock(t *testing.T) {
	t.Parallel()
	clk := memlock.NewFakeClock(time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC))
	l, err := memlock.New(&memlock.Config{TTL: 3 * time.Second, Clock: clk})
	require.NoError(t, err)
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "x")
	require.NoError(t, err)
	// A held lock has three timers: its heartbeat, its loss and its expiry.
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, clk.WaitForTimers(wait, 3))
	for range 9 { // 9 s: three TTLs, renewed every second
		clk.Advance(time.Second)
		require.NoError(t, clk.WaitForTimers(wait, 3)) // the heartbeat has renewed and rescheduled
	}
	require.NoError(t, lk.Err(), "heartbeats keep it")

	acquired := make(chan pglock.Lock, 1)
	go func() {
		next, err := l.Acquire(ctx, "x")
		assert.NoError(t, err)
		acquired <- next
	}()
	testdb.WaitFor(t, func() bool { return l.Waiting("x") == 1 })
	heal := l.Partition()
	defer heal()
	renewedAt := lk.(*memlock.Lock).ExpiresAt().Add(-3 * time.Second)
	clk.Advance(renewedAt.Add(2700*time.Millisecond).Sub(clk.Now()) - time.Millisecond)
	require.NoError(t, lk.Err(), "not yet: 1 ms before the deadline")
	clk.Advance(time.Millisecond)
	testdb.Receive(t, lk.Lost())
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
	select {
	case <-acquired:
		t.Fatal("the waiter got the lock before it expired")
	default:
	}
	clk.Advance(300 * time.Millisecond)
	next := testdb.Receive(t, acquired)
	require.Greater(t, next.Token(), lk.Token())
	heal()
	require.NoError(t, next.Release(ctx))
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	_, err := memlock.New(&memlock.Config{TTL: time.Millisecond})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	l, err := memlock.New(nil)
	require.NoError(t, err)
	_, err = l.TryAcquire(context.Background(), "")
	require.ErrorIs(t, err, pglock.ErrInvalidName)
	_, err = l.Acquire(context.Background(), "")
	require.ErrorIs(t, err, pglock.ErrInvalidName)
}

func TestCloseEndsTheLocksStillHeld(t *testing.T) {
	t.Parallel()
	l, err := memlock.New(nil)
	require.NoError(t, err)
	ctx := context.Background()
	a, err := l.Acquire(ctx, "a")
	require.NoError(t, err)
	b, err := l.Acquire(ctx, "b")
	require.NoError(t, err)
	l.Close()
	for _, lk := range []pglock.Lock{a, b} {
		testdb.Receive(t, lk.Lost())
		require.ErrorIs(t, lk.Err(), pglock.ErrClosed)
		require.ErrorIs(t, lk.Release(ctx), pglock.ErrLockLost)
	}
	again, err := l.TryAcquire(ctx, "a")
	require.NoError(t, err, "freed")
	require.NoError(t, again.Release(ctx))
}

// wallClock is a Clock of the caller's own, on real time: Config.Clock is an interface a user
// implements without naming anything internal.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }
func (wallClock) AfterFunc(d time.Duration, f func()) memlock.Timer {
	return time.AfterFunc(d, f)
}

func TestConfigClockTakesTheCallersClock(t *testing.T) {
	t.Parallel()
	l, err := memlock.New(&memlock.Config{TTL: time.Second, Clock: wallClock{}})
	require.NoError(t, err)
	lk, err := l.TryAcquire(context.Background(), "mine")
	require.NoError(t, err)
	require.NoError(t, lk.Release(context.Background()))
}
