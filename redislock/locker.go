package redislock

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock"
)

// Locker takes named locks on one Redis server (or Redis Cluster). Create one per process and
// client and share it; its methods are safe for concurrent use.
type Locker struct {
	c *core
	n *node
}

// New returns a Locker on client. A nil opts means the defaults.
func New(client redis.UniversalClient, opts *Options) (*Locker, error) {
	if isNil(client) {
		return nil, errorf("%w: nil Redis client", pglock.ErrInvalidArgument)
	}
	cfg, err := newConfig(opts, false)
	if err != nil {
		return nil, err
	}
	n := &node{client: client, cfg: &cfg, channel: cfg.prefix + ":released"}
	return &Locker{c: newCore(cfg, single{n}, []*node{n}), n: n}, nil
}

// TryAcquire takes the lock if it is free and nobody waits for it, or returns an error matching
// [pglock.ErrLocked].
func (l *Locker) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	h, err := l.c.take(ctx, name, false, true)
	return lockOf(h), err
}

// Acquire waits until it holds the lock, in the order of arrival, or ctx is done (an error
// matching [pglock.ErrLockTimeout] at ctx's deadline).
func (l *Locker) Acquire(ctx context.Context, name string) (*Lock, error) {
	h, err := l.c.take(ctx, name, true, true)
	return lockOf(h), err
}

// WithLock acquires the lock as Acquire does, runs fn, and releases it. fn's ctx is canceled,
// with cause [pglock.ErrLockLost], if the lock is lost meanwhile; WithLock then returns that error
// too.
func (l *Locker) WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	h, err := l.c.take(ctx, name, true, true)
	return l.c.withLock(ctx, h, err, fn)
}

// Holder describes who holds a lock, for operators.
type Holder struct {
	Token      int64
	Instance   string         // app@host:pid
	Metadata   map[string]any // the holder's Options.Metadata
	AcquiredAt time.Time      // on Redis's clock
	ExpiresIn  time.Duration  // unless renewed
}

// Holder returns who holds name, or an error matching [pglock.ErrNotFound] if nobody does.
func (l *Locker) Holder(ctx context.Context, name string) (Holder, error) {
	if err := pglock.ValidateName(name); err != nil {
		return Holder{}, err
	}
	k := keysOf(l.c.cfg.prefix, name)
	var info *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	if _, err := l.n.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		info, ttl = p.HGetAll(ctx, k.info), p.PTTL(ctx, k.lock)
		return nil
	}); err != nil {
		return Holder{}, errorf("holder of %q: %w", name, err)
	}
	fields := info.Val()
	if ttl.Val() <= 0 || len(fields) == 0 {
		return Holder{}, errorf("%w: %q is not held", pglock.ErrNotFound, name)
	}
	h := Holder{Instance: fields["instance"], ExpiresIn: ttl.Val()}
	h.Token, _ = strconv.ParseInt(fields["token"], 10, 64)
	if ms, err := strconv.ParseInt(fields["acquired_ms"], 10, 64); err == nil {
		h.AcquiredAt = time.UnixMilli(ms)
	}
	if m := fields["metadata"]; m != "" {
		_ = json.Unmarshal([]byte(m), &h.Metadata) // written by a Locker, from JSON
	}
	return h, nil
}

// Waiting returns how many Acquire calls, of every process, wait for name.
func (l *Locker) Waiting(ctx context.Context, name string) (int, error) {
	if err := pglock.ValidateName(name); err != nil {
		return 0, err
	}
	return l.n.waiting(ctx, name)
}

// ForceRelease takes the lock from its holder, as `pglockctl release --force` does for a table
// lock: the first waiter is woken, and the holder learns at its next renewal. It reports
// whether the lock was held.
func (l *Locker) ForceRelease(ctx context.Context, name string) (bool, error) {
	if err := pglock.ValidateName(name); err != nil {
		return false, err
	}
	return l.n.release(ctx, name, "", false)
}

// Close ends every lock still held, as tablelock.Locker.Close does: each is declared lost (its
// Err matches [pglock.ErrLockLost] and [pglock.ErrClosed]) and released, and waiting acquisitions
// end with [pglock.ErrClosed]. It does not close the client.
func (l *Locker) Close(ctx context.Context) error { return l.c.close(ctx) }

// AsLocker returns l as a [pglock.Locker].
func (l *Locker) AsLocker() pglock.Locker {
	return asLocker{
		take: func(ctx context.Context, name string, wait bool) (*held, error) {
			return l.c.take(ctx, name, wait, true)
		},
		withLock: l.WithLock,
	}
}

// single is a Locker's store: one node, where waiters are served in order and tokens drawn.
type single struct{ n *node }

func (s single) attempt(ctx context.Context, name, holder, waiter string) (attempt, error) {
	return s.n.attempt(ctx, name, holder, waiter, true, true)
}

func (s single) renew(ctx context.Context, name, holder string, ttl time.Duration) (time.Time, bool, error) {
	start := time.Now()
	state, err := s.n.extend(ctx, name, holder, ttl)
	if err != nil {
		return time.Time{}, false, err
	}
	return start.Add(ttl), state == 1, nil
}

func (s single) release(ctx context.Context, name, holder string, giveBack bool) (bool, error) {
	return s.n.release(ctx, name, holder, giveBack)
}

func (s single) leave(ctx context.Context, name, waiter string) { s.n.leave(ctx, name, waiter) }

// Lock is a lock held on a Redis server.
type Lock struct{ h *held }

func lockOf(h *held) *Lock {
	if h == nil {
		return nil
	}
	return &Lock{h}
}

// Name is the lock's name.
func (lk *Lock) Name() string { return lk.h.name }

// Token is the lock's fencing token, larger than that of every earlier holder of the name as
// long as Redis keeps its writes: with appendonly yes and appendfsync always, and no replica
// promoted over writes it had not received (docs/redis.md).
func (lk *Lock) Token() int64 { return lk.h.token }

// Lost is closed once the lock is lost; Err then says why.
func (lk *Lock) Lost() <-chan struct{} { return lk.h.keeper.Lost() }

// Err is nil until the lock is lost, then an error matching [pglock.ErrLockLost].
func (lk *Lock) Err() error { return lk.h.keeper.Err() }

// Deadline is when, on this process's clock, the lock will be declared lost unless renewed.
func (lk *Lock) Deadline() time.Time { return lk.h.keeper.Deadline() }

// Release gives the lock up, waking the first waiter. An error matching [pglock.ErrLockLost]
// means it had been lost; a second Release returns one matching [pglock.ErrNotHeld].
func (lk *Lock) Release(ctx context.Context) error { return lk.h.release(ctx) }

// asLocker is a Locker or Redlock as a [pglock.Locker].
type asLocker struct {
	take     func(ctx context.Context, name string, wait bool) (*held, error)
	withLock func(ctx context.Context, name string, fn func(ctx context.Context) error) error
}

func (a asLocker) TryAcquire(ctx context.Context, name string) (pglock.Lock, error) {
	return a.lock(a.take(ctx, name, false))
}

func (a asLocker) Acquire(ctx context.Context, name string) (pglock.Lock, error) {
	return a.lock(a.take(ctx, name, true))
}

func (a asLocker) WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	return a.withLock(ctx, name, fn)
}

func (asLocker) lock(h *held, err error) (pglock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return heldLock{h}, nil
}

// heldLock is a held lock as a [pglock.Lock]: its Token panics for a lock without fencing tokens.
type heldLock struct{ *held }

func (l heldLock) Name() string                      { return l.name }
func (l heldLock) Lost() <-chan struct{}             { return l.keeper.Lost() }
func (l heldLock) Err() error                        { return l.keeper.Err() }
func (l heldLock) Release(ctx context.Context) error { return l.release(ctx) }
func (l heldLock) Token() int64 {
	if !l.fenced {
		panic(errNoToken(l.name))
	}
	return l.token
}

func errNoToken(name string) error {
	return errorf("%w: %q is a Redlock lock; Redlock's nodes cannot agree on a number that only grows, so nothing it "+
		"returned could fence a write (docs/redis.md)", pglock.ErrNoFencingToken, name)
}
