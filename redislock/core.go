package redislock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/lease"
)

// store is how a core takes, keeps and gives up locks: on one node (Locker), or by a quorum of
// independent nodes (Redlock).
type store interface {
	// attempt tries once to take name for holder; waiter ("" for a try) keeps its place.
	attempt(ctx context.Context, name, holder, waiter string) (attempt, error)
	// renew renews holder's lock for ttl: held false once it is no longer holder's.
	renew(ctx context.Context, name, holder string, ttl time.Duration) (expiresAt time.Time, held bool, err error)
	// release frees name if holder holds it (anyone, for ""), false if not; giveBack for what an
	// acquisition that did not complete may have taken. An error with true: released, but not
	// everywhere it may be (a node that did not answer).
	release(ctx context.Context, name, holder string, giveBack bool) (bool, error)
	// leave takes a waiter that gave up out of name's queue.
	leave(ctx context.Context, name, waiter string)
}

// core is what Locker and Redlock share: the acquisition loop, the held locks and their lease
// keepers, the waiters a release wakes, and Close.
type core struct {
	cfg   config
	store store

	ctx        context.Context // ends at Close: renewals, attempts, waits and listeners stop
	stop       context.CancelFunc
	cleanup    context.Context // the background's cleanups: they end when Close's ctx does
	endCleanup context.CancelFunc
	taking     lease.Group // acquisitions under way
	leases     lease.Group // the keepers' timers
	background lease.Group // listeners, and cleanups: abandoned acquisitions, failed releases

	mu      sync.Mutex
	closed  bool
	waiters map[string]chan struct{} // this process's waiters, by id: a release names the one it wakes
	held    map[*held]struct{}
}

func newCore(cfg config, s store, nodes []*node) *core {
	c := &core{cfg: cfg, store: s, waiters: map[string]chan struct{}{}, held: map[*held]struct{}{}}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.cleanup, c.endCleanup = context.WithCancel(context.Background())
	for _, n := range nodes {
		c.goBackground(func() { n.listen(c.ctx, c.wake) })
	}
	return c
}

// take takes name: once (a try), or waiting until it gets it, ctx ends or the core closes.
func (c *core) take(ctx context.Context, name string, wait bool, fenced bool) (*held, error) {
	if err := pglock.ValidateName(name); err != nil {
		return nil, err
	}
	if !c.taking.Begin() {
		return nil, errorf("acquire %q: %w", name, pglock.ErrClosed)
	}
	defer c.taking.End()
	// Close ends the attempts under way too, and waits for them.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(c.ctx, func() { cancel(pglock.ErrClosed) })()
	holder := newHolderID()
	if !wait {
		start := time.Now()
		a, err := c.store.attempt(ctx, name, holder, "")
		switch {
		case err != nil:
			c.abandon(name, holder, "") // it may have been taken before the answer was lost
			if errors.Is(context.Cause(ctx), pglock.ErrClosed) {
				return nil, errorf("acquire %q: %w", name, pglock.ErrClosed)
			}
			return nil, err
		case !a.held:
			return nil, errorf("%w: %q", pglock.ErrLocked, name)
		}
		return c.hold(name, holder, a.token, fenced, start)
	}

	waiter := newHolderID()
	woken := make(chan struct{}, 1)
	c.mu.Lock()
	c.waiters[waiter] = woken
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, waiter)
		c.mu.Unlock()
	}()
	polling := lease.Backoff{First: 10 * time.Millisecond, Max: c.cfg.maxPoll}
	var lastErr error
	for polls := 1; ; polls++ {
		start := time.Now()
		a, err := c.store.attempt(ctx, name, holder, waiter)
		if err == nil && a.held {
			return c.hold(name, holder, a.token, fenced, start)
		}
		delay := polling.Delay(polls)
		if err != nil {
			lastErr = err
		} else if a.retryIn > 0 {
			delay = min(delay, a.retryIn+time.Millisecond) // the holder's lease ends then
		}
		timer := time.NewTimer(delay)
		select {
		case <-woken:
			polls = 0
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			c.abandon(name, holder, waiter)
			err := context.Cause(ctx)
			switch {
			case errors.Is(err, pglock.ErrClosed):
				return nil, errorf("acquire %q: %w", name, err)
			case errors.Is(ctx.Err(), context.DeadlineExceeded): // whatever cause the caller gave
				err = errorf("%w: %w", pglock.ErrLockTimeout, err)
			}
			if lastErr != nil {
				return nil, errorf("acquire %q: %w (the last attempt: %w)", name, err, lastErr)
			}
			return nil, errorf("acquire %q: %w", name, err)
		}
		timer.Stop()
	}
}

// abandon cleans up after an acquisition that gave up, in the background: its waiter leaves the
// queue, and the lock is released if an attempt whose answer never came took it.
func (c *core) abandon(name, holder, waiter string) {
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.timing.TTL)
		defer cancel()
		if waiter != "" {
			c.store.leave(ctx, name, waiter)
		}
		c.store.release(ctx, name, holder, true)
	})
}

// releaseLater retries, in the background, a release that failed, until it is through or the
// lock's TTL has passed (Redis has then let it go anyway); false once Close has begun to wait.
func (c *core) releaseLater(name, holder string) bool {
	return c.goBackground(func() {
		ctx, cancel := context.WithTimeout(c.cleanup, c.cfg.timing.TTL)
		defer cancel()
		retries := lease.RetryBackoff(c.cfg.timing.Heartbeat)
		for n := 1; retries.Sleep(ctx, n); n++ {
			if _, err := c.store.release(ctx, name, holder, false); err == nil {
				return
			}
		}
	})
}

// hold keeps a lock just taken, whose attempt started at start.
func (c *core) hold(name, holder string, token int64, fenced bool, start time.Time) (*held, error) {
	h := &held{c: c, name: name, holder: holder, token: token, fenced: fenced}
	keeper, err := lease.New(lease.Config{
		Name: name, Timing: c.cfg.timing, Start: start, ExpiresAt: start.Add(c.cfg.timing.TTL),
		Ctx: c.ctx, Tracker: &c.leases,
		Renew: func(ctx context.Context, ttl time.Duration) (time.Time, bool, error) {
			return c.store.renew(ctx, name, holder, ttl)
		},
		OnLost: func(error, pglock.Cause) { c.forget(h) },
	})
	if err != nil { // never: the Config is whole
		c.abandon(name, holder, "")
		return nil, errorf("acquire %q: %w", name, err)
	}
	h.keeper = keeper
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.abandon(name, holder, "")
		return nil, errorf("acquire %q: %w", name, pglock.ErrClosed)
	}
	c.held[h] = struct{}{}
	c.mu.Unlock()
	h.keeper.Start()
	return h, nil
}

// goBackground runs f in a goroutine Close waits for; not at all once Close has begun to wait
// (false then).
func (c *core) goBackground(f func()) bool {
	if !c.background.Begin() {
		return false
	}
	go func() {
		defer c.background.End()
		f()
	}()
	return true
}

func (c *core) forget(h *held) {
	c.mu.Lock()
	delete(c.held, h)
	c.mu.Unlock()
}

// wake wakes this process's waiter a release named, if it is one of ours.
func (c *core) wake(waiter string) {
	c.mu.Lock()
	woken := c.waiters[waiter]
	c.mu.Unlock()
	if woken != nil {
		select {
		case woken <- struct{}{}:
		default:
		}
	}
}

// withLock runs fn holding h, and releases it.
func (c *core) withLock(ctx context.Context, h *held, err error, fn func(ctx context.Context) error) error {
	if err != nil {
		return err
	}
	fnCtx, stop := h.keeper.Guard(ctx)
	defer stop()
	released := false
	defer func() {
		if !released { // fn panicked
			h.release(context.Background())
		}
	}()
	fnErr := fn(fnCtx)
	released = true
	return errors.Join(fnErr, h.release(context.Background()))
}

// close ends every lock still held (declared lost: [pglock.ErrClosed]) and releases it, ends the
// acquisitions under way with [pglock.ErrClosed] (their waiters leave the queue), and waits for
// the background work to end; the cleanups in it are cut short once ctx ends.
func (c *core) close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := make([]*held, 0, len(c.held))
	for h := range c.held {
		held = append(held, h)
	}
	c.mu.Unlock()
	var failed []error
	for _, h := range held {
		h.keeper.Lose(pglock.CauseClosed, errorf("%w: %w: %q was released by Close", pglock.ErrLockLost, pglock.ErrClosed, h.name))
		if h.keeper.Stop() {
			if _, err := c.store.release(ctx, h.name, h.holder, false); err != nil && !c.releaseLater(h.name, h.holder) {
				failed = append(failed, err)
			}
		}
	}
	defer context.AfterFunc(ctx, c.endCleanup)()
	c.stop()
	c.taking.Wait()
	c.leases.Wait()
	c.background.Wait()
	c.endCleanup()
	return errors.Join(failed...)
}

// held is a lock taken by a core: Locker's Lock and Redlock's RedlockLock are views of it.
type held struct {
	c      *core
	name   string
	holder string
	token  int64
	fenced bool
	keeper *lease.Keeper
}

// release gives the lock up: an error matching [pglock.ErrLockLost] if it had been lost, one
// matching [pglock.ErrNotHeld] if it was released before.
func (h *held) release(ctx context.Context) error {
	if !h.keeper.Stop() {
		if lost := h.keeper.Err(); lost != nil {
			return lost
		}
		return errorf("%w: %q was already released", pglock.ErrNotHeld, h.name)
	}
	h.c.forget(h)
	// Released even when lost: a lock declared lost while renewals failed may still be ours
	// there, and is freed sooner so.
	released, err := h.c.store.release(ctx, h.name, h.holder, false)
	retried := err != nil && h.c.releaseLater(h.name, h.holder) // owner-checked: harmless if it is gone
	if lost := h.keeper.Err(); lost != nil {
		return lost
	}
	switch {
	case err != nil && released:
		return nil // released; what a node that did not answer still has is released in the background
	case err != nil && retried:
		return errorf("release %q (trying again in the background): %w", h.name, err)
	case err != nil:
		return errorf("release %q (it stays held until its TTL runs out): %w", h.name, err)
	}
	if !released {
		lost := errorf("%w: %w: %q was no longer held at release (force-released, or expired)", pglock.ErrLockLost, pglock.ErrNotHeld, h.name)
		h.keeper.LostBeforeStop(lost)
		return lost
	}
	return nil
}
