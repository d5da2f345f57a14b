// Package locktest is the conformance suite of pglock.Locker: the behaviour code that takes
// locks through the interface may count on, whichever Locker it is given. Every Locker passes
// the cases of mutual exclusion, WithLock and contexts, and those of each capability it
// declares; tablelock, memlock and both redislock Lockers run it.
package locktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
)

// Capabilities are what a Locker promises beyond mutual exclusion (docs/redis.md's table).
type Capabilities struct {
	// Fencing: Token grows across the holders of a name. Without it, Token must panic with an
	// error matching pglock.ErrNoFencingToken.
	Fencing bool
	// DurableFencing: it grows across a crash and restart of the store too (NewRestartable).
	DurableFencing bool
	// Fairness: Acquire serves waiters in the order of arrival (Waiting).
	Fairness bool
	// LossSignal: a lock taken from its holder closes Lost and cancels WithLock's fn
	// (ForceRelease).
	LossSignal bool
}

// Subject is a Locker implementation under test.
type Subject struct {
	Capabilities
	// New returns the Lockers of two instances sharing one set of locks (a fresh set for each
	// call), with leases short enough that a force release is noticed within a second or so.
	New func(t *testing.T) (pglock.Locker, pglock.Locker)
	// ForceRelease takes name's lock from its holder, as an operator would.
	ForceRelease func(t *testing.T, name string)
	// Waiting returns how many Acquire calls wait for name.
	Waiting func(t *testing.T, name string) int
	// NewRestartable returns a Locker on a store of its own, and restart, which crashes the
	// store (SIGKILL, or PostgreSQL's immediate shutdown) and starts it again.
	NewRestartable func(t *testing.T) (l pglock.Locker, restart func())
}

// Run runs against s every case it must pass: those of every Locker, and those of the
// capabilities s declares.
func Run(t *testing.T, s Subject) {
	require.False(t, s.LossSignal && s.ForceRelease == nil, "LossSignal needs ForceRelease")
	require.False(t, s.Fairness && s.Waiting == nil, "Fairness needs Waiting")
	require.False(t, s.DurableFencing && (s.NewRestartable == nil || !s.Fencing), "DurableFencing needs Fencing and NewRestartable")
	for _, c := range []struct {
		name     string
		declared bool
		test     func(t *testing.T, s Subject)
	}{
		{"TryAcquireOfAHeldLockIsRefused", true, tryAcquireOfAHeldLockIsRefused},
		{"OneHolderAtATime", true, oneHolderAtATime},
		{"WithLockReleasesWhatItTook", true, withLockReleasesWhatItTook},
		{"AcquireEndsWithItsContext", true, acquireEndsWithItsContext},
		{"TokensIncreaseAcrossHolders", s.Fencing, tokensIncreaseAcrossHolders},
		{"TokenRefusesWithoutFencing", !s.Fencing, tokenRefusesWithoutFencing},
		{"TokensIncreaseAcrossARestartOfTheStore", s.DurableFencing, tokensIncreaseAcrossARestartOfTheStore},
		{"WaitersAreServedInArrivalOrder", s.Fairness, waitersAreServedInArrivalOrder},
		{"ForceReleaseIsSignalledToTheHolder", s.LossSignal, forceReleaseIsSignalledToTheHolder},
		{"WithLockCancelsFnWhenTheLockIsLost", s.LossSignal, withLockCancelsFnWhenTheLockIsLost},
	} {
		if !c.declared {
			continue // a capability the Locker does not claim: nothing to hold it to
		}
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
		locker := alternate(i, a, b)
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
		locker := alternate(i, a, b)
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
	if s.Fencing {
		require.Greater(t, next.Token(), lk.Token())
	}
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

// Eight goroutines of two instances take one name 40 times in all; none finds another inside.
func oneHolderAtATime(t *testing.T, s Subject) {
	a, b := s.New(t)
	var inside, entered atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		locker := alternate(i, a, b)
		wg.Go(func() {
			for range 5 {
				err := locker.WithLock(context.Background(), "x", func(context.Context) error {
					if n := inside.Add(1); n != 1 {
						return errors.New("another holder was inside")
					}
					entered.Add(1)
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					return nil
				})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 40, entered.Load())
}

func tokenRefusesWithoutFencing(t *testing.T, s Subject) {
	a, _ := s.New(t)
	ctx := context.Background()
	lk, err := a.Acquire(ctx, "x")
	require.NoError(t, err)
	defer func() { require.NoError(t, lk.Release(ctx)) }()
	defer func() {
		r := recover()
		err, _ := r.(error)
		require.ErrorIs(t, err, pglock.ErrNoFencingToken, "Token panics with an error, not a number")
	}()
	token := lk.Token()
	t.Fatalf("Token returned %d for a lock without fencing tokens", token)
}

// Tokens drawn before a crash of the store are all smaller than the first drawn after it.
func tokensIncreaseAcrossARestartOfTheStore(t *testing.T, s Subject) {
	l, restart := s.NewRestartable(t)
	ctx := context.Background()
	var last int64
	for range 3 {
		lk, err := l.Acquire(ctx, "x")
		require.NoError(t, err)
		require.Greater(t, lk.Token(), last)
		last = lk.Token()
		require.NoError(t, lk.Release(ctx))
	}
	restart()
	var lk pglock.Lock
	testdb.WaitFor(t, func() bool {
		var err error
		lk, err = l.TryAcquire(ctx, "x")
		return err == nil // connections the crash cut fail until they are replaced
	}, "the store answers again")
	require.Greater(t, lk.Token(), last, "a token drawn after the restart")
	require.NoError(t, lk.Release(ctx))
}

// alternate is a for even i, b for odd: the two instances take turns.
func alternate(i int, a, b pglock.Locker) pglock.Locker {
	if i%2 == 1 {
		return b
	}
	return a
}
