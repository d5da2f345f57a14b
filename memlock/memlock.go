package memlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
)

// Clock tells the time and runs functions later. NewFakeClock returns one a test advances;
// tests may also bring their own.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the timer is stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc, as *time.Timer is for time.AfterFunc.
type Timer = interface {
	// Stop prevents the call; false if it has already started or the timer was stopped.
	Stop() bool
	// Reset makes the call due d from now (again, if it had already run).
	Reset(d time.Duration) bool
}

// FakeClock is a Clock that stands still until a test advances it.
type FakeClock struct{ fake *clock.Fake }

// NewFakeClock returns a clock that stands at start until advanced.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{clock.NewFake(start)} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time { return c.fake.Now() }

// AfterFunc schedules f at the fake time d from now.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer { return c.fake.AfterFunc(d, f) }

// Advance moves the time forward by d and starts the functions of the timers that have come
// due, each in its own goroutine as real timers do: they may still run when Advance returns.
func (c *FakeClock) Advance(d time.Duration) { c.fake.Advance(d) }

// Pending returns how many timers are set, and when the earliest is due (zero if none).
func (c *FakeClock) Pending() (n int, next time.Duration) { return c.fake.Pending() }

// WaitForTimers returns once at least n timers are set (a held lock sets three: its heartbeat,
// its loss and its expiry), or ctx's error if ctx ends first.
func (c *FakeClock) WaitForTimers(ctx context.Context, n int) error {
	return c.fake.WaitForTimers(ctx, n)
}

// Config configures a Locker. A nil *Config, and every zero field, means the default.
type Config struct {
	// TTL is each lock's lease, renewed every third of it, and declared lost a tenth of it
	// before it expires when renewals fail. Default: DefaultTTL.
	TTL time.Duration
	// Clock is the time the leases are kept on. Default: real time.
	Clock Clock
}

// Locker is an in-memory [pglock.Locker]. Its methods are safe for concurrent use; any number of
// goroutines may share one, as instances share a database.
type Locker struct {
	timing lease.Timing
	clock  Clock

	mu          sync.Mutex
	tokens      int64
	held        map[string]*Lock
	queues      map[string][]chan *Lock // waiters in arrival order; each gets the lock handed to it
	partitioned bool
}

var _ pglock.Locker = (*Locker)(nil)

// DefaultTTL is Config.TTL's default.
const DefaultTTL = pglock.DefaultTTL

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	return cfg
}

// New returns an in-memory Locker. A nil cfg means the defaults.
func New(cfg *Config) (*Locker, error) {
	c := cfg.withDefaults()
	t, err := lease.NewTiming(c.TTL, 0, 0)
	if err != nil {
		return nil, errs.Errorf("%w: Config.TTL: %w", pglock.ErrInvalidArgument, err)
	}
	return &Locker{timing: t, clock: c.Clock, held: map[string]*Lock{}, queues: map[string][]chan *Lock{}}, nil
}

// TryAcquire takes the lock if it is free and nobody waits for it, or returns an error
// matching [pglock.ErrLocked].
func (l *Locker) TryAcquire(_ context.Context, name string) (pglock.Lock, error) {
	if err := pglock.ValidateName(name); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if holder := l.held[name]; holder != nil || len(l.queues[name]) > 0 {
		return nil, errs.Errorf("%w: %q", pglock.ErrLocked, name)
	}
	return l.take(name), nil
}

// Acquire waits until it holds the lock, in the order of arrival, or ctx is done (an error
// matching [pglock.ErrLockTimeout] at ctx's deadline).
func (l *Locker) Acquire(ctx context.Context, name string) (pglock.Lock, error) {
	if err := pglock.ValidateName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errs.Errorf("acquire %q: %w", name, context.Cause(ctx))
	}
	l.mu.Lock()
	if l.held[name] == nil && len(l.queues[name]) == 0 {
		defer l.mu.Unlock()
		return l.take(name), nil
	}
	handed := make(chan *Lock, 1)
	l.queues[name] = append(l.queues[name], handed)
	l.mu.Unlock()

	select {
	case lk := <-handed:
		return lk, nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	queue := l.queues[name]
	for i, w := range queue {
		if w == handed {
			l.queues[name] = append(queue[:i:i], queue[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
	select {
	case lk := <-handed: // handed over just as ctx ended: give it on
		lk.Release(context.Background())
	default:
	}
	err := context.Cause(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = errs.Errorf("%w: %w", pglock.ErrLockTimeout, err)
	}
	return nil, errs.Errorf("acquire %q: %w", name, err)
}

// WithLock acquires the lock as Acquire does, runs fn, and releases it. fn's ctx is canceled
// with cause [pglock.ErrLockLost] if the lock is lost; WithLock then returns that error too.
func (l *Locker) WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	lk, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	held := lk.(*Lock)
	fnCtx, stop := held.keeper.Guard(ctx)
	defer stop()
	released := false
	defer func() {
		if !released {
			held.Release(context.Background())
		}
	}()
	fnErr := fn(fnCtx)
	released = true
	return errors.Join(fnErr, held.Release(context.Background()))
}

// Waiting returns how many Acquire calls wait for name.
func (l *Locker) Waiting(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queues[name])
}

// ForceRelease takes the lock from its holder, as `pglockctl release --force` does: the next
// waiter gets it at once, and the holder learns at its next renewal. It reports whether the
// lock was held.
func (l *Locker) ForceRelease(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk := l.held[name]
	if lk == nil {
		return false
	}
	l.free(lk)
	return true
}

// Partition makes every renewal fail, as a network partition between the holders and the
// database would: holders declare their locks lost a tenth of the TTL before they expire, and
// an expired lock goes to its next waiter. heal lets renewals through again.
func (l *Locker) Partition() (heal func()) {
	l.mu.Lock()
	l.partitioned = true
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.partitioned = false
		l.mu.Unlock()
	}
}

// Close ends every lock still held, as tablelock.Locker.Close does: each is declared lost (its
// Err matches [pglock.ErrLockLost] and [pglock.ErrClosed]) and freed, and its heartbeats stop.
// Waiters get the freed locks as usual; a test calls Close when it is done with the Locker.
func (l *Locker) Close() {
	l.mu.Lock()
	held := make([]*Lock, 0, len(l.held))
	for _, lk := range l.held {
		held = append(held, lk)
	}
	l.mu.Unlock()
	for _, lk := range held {
		lk.keeper.Lose(pglock.CauseClosed, errs.Errorf("%w: %w: %q was released by Locker.Close", pglock.ErrLockLost, pglock.ErrClosed, lk.name))
		if lk.keeper.Stop() {
			l.mu.Lock()
			if lk.isHeld() {
				l.free(lk)
			}
			l.mu.Unlock()
		}
	}
}

// take makes name's lock held by a new holder and starts keeping it. Called with l.mu held.
func (l *Locker) take(name string) *Lock {
	l.tokens++
	now := l.clock.Now()
	lk := &Lock{l: l, name: name, token: l.tokens, expiresAt: now.Add(l.timing.TTL)}
	lk.expiry = l.clock.AfterFunc(l.timing.TTL, lk.expire)
	lk.keeper = lease.New(lease.Config{
		Name: name, Timing: l.timing, Start: now, ExpiresAt: lk.expiresAt, Ctx: context.Background(), Clock: l.clock,
		Renew: lk.renew,
	})
	l.held[name] = lk
	lk.keeper.Start()
	return lk
}

// free ends lk's hold on its name and hands the name to the first waiter. Called with l.mu held.
func (l *Locker) free(lk *Lock) {
	delete(l.held, lk.name)
	lk.expiry.Stop()
	if queue := l.queues[lk.name]; len(queue) > 0 {
		next := queue[0]
		l.queues[lk.name] = queue[1:]
		if len(l.queues[lk.name]) == 0 {
			delete(l.queues, lk.name)
		}
		next <- l.take(lk.name)
	}
}

// Lock is a lock held in memory.
type Lock struct {
	l         *Locker
	name      string
	token     int64
	keeper    *lease.Keeper
	expiresAt time.Time   // guarded by l.mu
	expiry    clock.Timer // frees the lock when its lease ends unrenewed
}

func (lk *Lock) Name() string          { return lk.name }
func (lk *Lock) Token() int64          { return lk.token }
func (lk *Lock) Lost() <-chan struct{} { return lk.keeper.Lost() }
func (lk *Lock) Err() error            { return lk.keeper.Err() }
func (lk *Lock) ExpiresAt() time.Time  { lk.l.mu.Lock(); defer lk.l.mu.Unlock(); return lk.expiresAt }
func (lk *Lock) isHeld() bool          { return lk.l.held[lk.name] == lk }
func (lk *Lock) errNotHeld(what string) error {
	return errs.Errorf("%w: %w: %q %s", pglock.ErrLockLost, pglock.ErrNotHeld, lk.name, what)
}

// Release gives the lock up, to the first waiter if there is one. An error matching
// [pglock.ErrLockLost] means it had been lost; a second Release returns one matching
// [pglock.ErrNotHeld].
func (lk *Lock) Release(context.Context) error {
	if !lk.keeper.Stop() {
		if err := lk.Err(); err != nil {
			return err
		}
		return errs.Errorf("%w: %q was already released", pglock.ErrNotHeld, lk.name)
	}
	lk.l.mu.Lock()
	held := lk.isHeld()
	if held {
		lk.l.free(lk)
	}
	lk.l.mu.Unlock()
	if !held {
		lost := lk.errNotHeld("was no longer held at release (force-released, or expired)")
		lk.keeper.LostBeforeStop(lost)
		return lost
	}
	return nil
}

// renew is the lease keeper's renewal: it fails while the Locker is partitioned.
func (lk *Lock) renew(_ context.Context, ttl time.Duration) (time.Time, bool, error) {
	l := lk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.partitioned:
		return time.Time{}, false, errors.New("partitioned from its leases by Locker.Partition")
	case !lk.isHeld():
		return time.Time{}, false, nil
	}
	lk.expiresAt = l.clock.Now().Add(ttl)
	lk.expiry.Stop()
	lk.expiry = l.clock.AfterFunc(ttl, lk.expire)
	return lk.expiresAt, true, nil
}

// expire frees the lock once its lease has ended unrenewed.
func (lk *Lock) expire() {
	l := lk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk.isHeld() && !l.clock.Now().Before(lk.expiresAt) {
		l.free(lk)
	}
}
