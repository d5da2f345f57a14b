// Package locktest is the conformance suite of pglock.Locker: the behaviour code that takes
// locks through the interface may count on, whichever Locker it is given. tablelock and memlock
// both run it.
package locktest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
)

// Subject is a Locker implementation under test.
type Subject struct {
	// New returns the Lockers of two instances sharing one set of locks (a fresh set for each
	// call), with leases short enough that a force release is noticed within a second or so.
	New func(t *testing.T) (pglock.Locker, pglock.Locker)
	// ForceRelease takes name's lock from its holder, as an operator would.
	ForceRelease func(t *testing.T, name string)
	// Waiting returns how many Acquire calls wait for name.
	Waiting func(t *testing.T, name string) int
}

// Run runs the suite against s.
func Run(t *testing.T, s Subject) {
	for _, c := range []struct {
		name string
		test func(t *testing.T, s Subject)
	}{
		{"TryAcquireOfAHeldLockIsRefused", tryAcquireOfAHeldLockIsRefused},
		{"TokensIncreaseAcrossHolders", tokensIncreaseAcrossHolders},
		{"WaitersAreServedInArrivalOrder", waitersAreServedInArrivalOrder},
		{"ForceReleaseIsSignalledToTheHolder", forceReleaseIsSignalledToTheHolder},
		{"WithLockCancelsFnWhenTheLockIsLost", withLockCancelsFnWhenTheLockIsLost},
		{"WithLockReleasesWhatItTook", withLockReleasesWhatItTook},
		{"AcquireEndsWithItsContext", acquireEndsWithItsContext},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t, s)
		})
	}
}

func tryAcquireOfAHeldLockIsRefused(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	lk, err := a.TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, "x", lk.Name())
	_, err = b.TryAcquire(ctx, "x")
	require.ErrorIs(t, err, pglock.ErrLocked)
	_, err = a.TryAcquire(ctx, "x")
	require.ErrorIs(t, err, pglock.ErrLocked, "not even by the same instance")
	require.NoError(t, lk.Release(ctx))
	require.ErrorIs(t, lk.Release(ctx), pglock.ErrNotHeld, "a second Release")
	again, err := b.TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))
}

func tokensIncreaseAcrossHolders(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	var last int64
	for i := range 6 {
		locker := a
		if i%2 == 1 {
			locker = b
		}
		lk, err := locker.Acquire(ctx, "x")
		require.NoError(t, err)
		require.Greater(t, lk.Token(), last)
		last = lk.Token()
		require.NoError(t, lk.Release(ctx))
	}
}

func waitersAreServedInArrivalOrder(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	held, err := a.Acquire(ctx, "x")
	require.NoError(t, err)
	order := make(chan int, 4)
	var wg sync.WaitGroup
	for i := range 4 {
		locker := a
		if i%2 == 1 {
			locker = b
		}
		wg.Go(func() {
			lk, err := locker.Acquire(ctx, "x")
			if !assert.NoError(t, err) {
				return
			}
			order <- i
			assert.NoError(t, lk.Release(ctx))
		})
		testdb.WaitFor(t, func() bool { return s.Waiting(t, "x") == i+1 }, "waiter %d queued", i)
	}
	require.NoError(t, held.Release(ctx))
	wg.Wait()
	close(order)
	var served []int
	for i := range order {
		served = append(served, i)
	}
	require.Equal(t, []int{0, 1, 2, 3}, served)
}

func forceReleaseIsSignalledToTheHolder(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	lk, err := a.Acquire(ctx, "x")
	require.NoError(t, err)
	s.ForceRelease(t, "x")
	testdb.Receive(t, lk.Lost())
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
	require.ErrorIs(t, lk.Release(ctx), pglock.ErrLockLost, "Release says the lock had been lost")
	next, err := b.Acquire(ctx, "x")
	require.NoError(t, err)
	require.Greater(t, next.Token(), lk.Token())
	require.NoError(t, next.Release(ctx))
}

func withLockCancelsFnWhenTheLockIsLost(t *testing.T, s Subject) {
	a, _ := s.New(t)
	err := a.WithLock(context.Background(), "x", func(ctx context.Context) error {
		s.ForceRelease(t, "x")
		testdb.Receive(t, ctx.Done())
		require.ErrorIs(t, context.Cause(ctx), pglock.ErrLockLost)
		return ctx.Err()
	})
	require.ErrorIs(t, err, pglock.ErrLockLost)
}

func withLockReleasesWhatItTook(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := a.WithLock(ctx, "x", func(ctx context.Context) error {
		_, err := b.TryAcquire(ctx, "x")
		require.ErrorIs(t, err, pglock.ErrLocked, "held while fn runs")
		return boom
	})
	require.ErrorIs(t, err, boom)
	lk, err := b.TryAcquire(ctx, "x")
	require.NoError(t, err, "released when fn returned")
	require.NoError(t, lk.Release(ctx))
}

func acquireEndsWithItsContext(t *testing.T, s Subject) {
	a, b := s.New(t)
	ctx := context.Background()
	held, err := a.Acquire(ctx, "x")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = b.Acquire(short, "x")
	require.ErrorIs(t, err, pglock.ErrLockTimeout)
	require.NoError(t, held.Release(ctx))
	// The abandoned wait leaves the queue in the background (Acquire returns at once): a
	// release in between may hand the lock to it, which its leaving then releases.
	var lk pglock.Lock
	testdb.WaitFor(t, func() bool {
		lk, err = b.TryAcquire(ctx, "x")
		if errors.Is(err, pglock.ErrLocked) {
			return false
		}
		require.NoError(t, err)
		return true
	}, "the abandoned wait keeps nothing")
	require.NoError(t, lk.Release(ctx))
}
