package pglock

import (
	"context"
	"time"
)

// Locker is what code that takes named locks depends on, so that its tests can give it an
// in-memory Locker (package memlock) where production gives it a table lock Locker
// (tablelock.Locker.AsLocker), or a Redis-backed one (module redislock). They pass one
// conformance suite, each for the capabilities it declares (docs/redis.md): tokens increase
// (durably, across a restart of the store), waiters are served in order, a lost lock says so,
// WithLock releases what it took.
type Locker interface {
	// TryAcquire takes the lock if it is free, or returns an error matching ErrLocked.
	TryAcquire(ctx context.Context, name string) (Lock, error)
	// Acquire waits until it holds the lock, or ctx is done; waiters are served in the order of
	// arrival by every Locker but a Redlock one.
	Acquire(ctx context.Context, name string) (Lock, error)
	// WithLock runs fn holding the lock; fn's ctx is canceled, with cause ErrLockLost, if the
	// lock is lost meanwhile. The lock is released when fn returns.
	WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error
}

// Lock is a held lock.
type Lock interface {
	Name() string
	// Token is larger than that of every earlier holder of the name. A Lock that has none (a
	// Redlock lock) panics with an error matching ErrNoFencingToken: code that fences its
	// writes fails at once instead of writing behind a number that protects nothing.
	Token() int64
	// Lost is closed once the lock is lost (never for one released normally); Err then says
	// why, matching ErrLockLost.
	Lost() <-chan struct{}
	Err() error
	// Release gives the lock up; a second Release returns an error matching ErrNotHeld.
	Release(ctx context.Context) error
}

// DefaultTTL is the lease a table lock, a job attempt, a cron run or an in-memory lock gets when
// its configuration names none: long enough to ride out a failover or a long pause, short
// enough that a vanished holder's work is taken over well within a minute. tablelock, jobs,
// cron and memlock each export it as their DefaultTTL; leader elects with a shorter one.
const DefaultTTL = 30 * time.Second
