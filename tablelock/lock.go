package tablelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/db"
)

// Lock is a held table lock. Its methods are safe for concurrent use.
type Lock struct {
	l        *Locker
	name     string
	holder   string
	token    int64
	metadata map[string]any
	heldFrom time.Time

	lostCtx  context.Context // done once the lock is lost; its cause says why
	markLost context.CancelCauseFunc

	stopKeeping context.CancelFunc // cancels any renewal in flight, once released
	keepingCtx  context.Context

	// One renewal at a time, so that the lease always follows the latest: a token, not a
	// mutex, so that a renewal waiting behind one the server holds up still ends with its ctx
	// (for a heartbeat, when Close cancels it).
	renewing chan struct{}

	mu        sync.Mutex
	timing    timing
	expiresAt time.Time // by the database's clock
	deadline  time.Time // by this process's monotonic clock: the lock is lost from then on
	released  bool
	// Timers, not a goroutine, keep the lock: a goroutine per held lock, started at every
	// acquisition and woken at every release, costs a short-lived lock a large part of its
	// time in thread wake-ups.
	renewal  *time.Timer // the next heartbeat; nil without heartbeats
	loss     *time.Timer // fires at the deadline
	failures int         // renewals failed in a row: heartbeats back off while it is not 0
}

func newLock(l *Locker, req request, token int64, expiresAt, leaseStart time.Time) *Lock {
	lk := &Lock{
		l: l, name: req.name, holder: req.holder, token: token, metadata: req.metadata,
		heldFrom: time.Now(), timing: req.timing, expiresAt: expiresAt,
		deadline: leaseStart.Add(req.timing.ttl - req.timing.margin), renewing: make(chan struct{}, 1),
	}
	lk.lostCtx, lk.markLost = context.WithCancelCause(context.Background())
	lk.keepingCtx, lk.stopKeeping = context.WithCancel(l.ctx)
	return lk
}

// Name returns the lock's name.
func (lk *Lock) Name() string { return lk.name }

// Token returns the lock's fencing token: larger than that of every earlier holder of the name.
func (lk *Lock) Token() int64 { return lk.token }

// Metadata returns the metadata the lock was acquired with.
func (lk *Lock) Metadata() map[string]any { return lk.metadata }

// ExpiresAt returns when the lease ends unless renewed, by the database's clock, as of the last
// successful acquisition or renewal.
func (lk *Lock) ExpiresAt() time.Time {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.expiresAt
}

// Lost is closed once the lock is lost. It is never closed for a lock released normally.
func (lk *Lock) Lost() <-chan struct{} { return lk.lostCtx.Done() }

// Err returns nil while the lock is held or was released normally, and once it is lost an
// error matching pglock.ErrLockLost that says why.
func (lk *Lock) Err() error {
	if lk.lostCtx.Err() == nil {
		return nil
	}
	return context.Cause(lk.lostCtx)
}

// Extend renews the lease for ttl from now, in one round trip, and keeps renewing it with that
// TTL. A heartbeat under way finishes first; ctx bounds that wait too. On a lock no longer held
// it returns an error matching pglock.ErrLockLost.
func (lk *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	t, err := lk.l.cfg.timing(ttl)
	if err != nil {
		return err
	}
	if err := lk.Err(); err != nil {
		return err
	}
	return lk.renew(ctx, &t)
}

// Release gives the lock up, in one round trip: to the first waiter if there is one, else
// freeing it. If ctx ends first, or the connection fails, it returns that error and tries again
// in the background (Close waits for that); the lock is no longer renewed either way. An error
// matching pglock.ErrLockLost means the lock had been lost, signalled or not; nothing done
// under it since its last renewal is safe.
func (lk *Lock) Release(ctx context.Context) error {
	if !lk.markReleased() {
		if lost := lk.Err(); lost != nil { // released by Locker.Close, which declared it lost
			return lost
		}
		return fmt.Errorf("%w: %q was already released", pglock.ErrNotHeld, lk.name)
	}
	err := lk.releaseRow(ctx)
	if lost := lk.Err(); lost != nil {
		return lost
	}
	return err
}

// markReleased stops keeping the lock; false if it was released already. No need to wait for
// a renewal in flight to end: it can only fail (the row is gone), and a released lock is never
// declared lost.
func (lk *Lock) markReleased() bool {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released {
		return false
	}
	lk.released = true
	lk.stopTimers()
	lk.stopKeeping()
	lk.l.forget(lk)
	return true
}

// releaseRow gives the lock up in the database, in one round trip; if ctx ends first or the
// round trip fails on the way, again in the background.
func (lk *Lock) releaseRow(ctx context.Context) error {
	start := time.Now()
	row, err := lk.l.queries.ReleaseLock(ctx, db.ReleaseLockParams{LockName: lk.name, HolderID: lk.holder})
	switch {
	case err != nil && (ctx.Err() != nil || transient(err)) && lk.releaseLater():
		return fmt.Errorf("pglock: release %q (trying again in the background): %w", lk.name, err)
	case err != nil:
		return fmt.Errorf("pglock: release %q (it stays held until its TTL runs out): %w", lk.name, err)
	case !row.Released && lk.lostCtx.Err() == nil:
		err := fmt.Errorf("%w: %w: %q was no longer held at release (force-released, or expired and taken)",
			pglock.ErrLockLost, pglock.ErrNotHeld, lk.name)
		lk.markLost(err)
		lk.l.emit(Event{Kind: EventLost, Name: lk.name, Token: lk.token, Held: time.Since(lk.heldFrom), Err: err})
		return err
	case row.Released:
		lk.l.emit(Event{Kind: EventReleased, Name: lk.name, Token: lk.token, Latency: time.Since(start), Held: time.Since(lk.heldFrom)})
	}
	return nil
}

// releaseLater releases the lock in the background, counted in l.waits so that Close waits for
// it; false once the Locker is closed.
func (lk *Lock) releaseLater() bool {
	t, _ := lk.state()
	l := lk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.leave(lk.name, lk.holder, t.ttl) // counted under l.mu, before Close (which sets closed under it) can wait
	return true
}

// Fence verifies, inside tx, that the lock is still held with its token, and keeps it so until
// tx ends: no release, renewal, handoff or takeover of the lock can commit before. Write to the
// protected resource in tx after Fence, and keep tx short, for it also holds up renewals. It
// returns an error matching pglock.ErrLockLost (and signals the loss) when the lock is lost.
func (lk *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	if err := lk.Err(); err != nil {
		return err
	}
	err := VerifyFence(ctx, tx, lk.name, lk.token)
	if errors.Is(err, pglock.ErrLockLost) {
		lk.lose(err)
	}
	return err
}

// VerifyFence is Fence for a name and token known without the Lock, such as in a process the
// token was handed to.
func VerifyFence(ctx context.Context, tx pgx.Tx, name string, token int64) error {
	if tx == nil {
		return fmt.Errorf("%w: nil transaction", pglock.ErrInvalidArgument)
	}
	if err := pglock.ValidateName(name); err != nil {
		return err
	}
	held, err := db.New(db.Translating(tx)).VerifyFence(ctx, db.VerifyFenceParams{LockName: name, FencingToken: token})
	if err != nil {
		return fmt.Errorf("pglock: verify fence of %q: %w", name, err)
	}
	if !held {
		return fmt.Errorf("%w: %q is not held with token %d", pglock.ErrLockLost, name, token)
	}
	return nil
}

// renew extends the lease from now, with t's TTL (the lock's current one when t is nil). The
// new deadline counts from the start of the request: the database set expires_at no earlier
// than that, plus the TTL. The deadline moves in before the request is sent when the new lease
// is shorter: a request that fails here may still have committed there.
func (lk *Lock) renew(ctx context.Context, t *timing) error {
	if err := lk.takeTurn(ctx); err != nil {
		return err
	}
	defer func() { <-lk.renewing }()
	start := time.Now()
	lk.mu.Lock()
	if lk.released {
		lk.mu.Unlock()
		if lost := lk.Err(); lost != nil { // given up by Locker.Close
			return lost
		}
		return fmt.Errorf("%w: %q was released", pglock.ErrNotHeld, lk.name)
	}
	if t == nil {
		current := lk.timing
		t = &current
	}
	if shorter := start.Add(t.ttl - t.margin); shorter.Before(lk.deadline) {
		lk.deadline = shorter
		lk.signalChange()
	}
	lk.mu.Unlock()

	expiresAt, err := lk.l.queries.ExtendLock(ctx, db.ExtendLockParams{LockName: lk.name, HolderID: lk.holder, TtlMs: t.ttl.Milliseconds()})
	switch {
	case err == nil:
		lk.mu.Lock()
		lost := lk.lostCtx.Err() != nil // at its deadline, while the request was on its way
		if !lost {
			lk.timing, lk.expiresAt, lk.deadline = *t, expiresAt, start.Add(t.ttl-t.margin)
			lk.failures = 0
			lk.signalChange()
		}
		lk.mu.Unlock()
		if lost {
			return lk.Err()
		}
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		lk.lose(fmt.Errorf("%w: %q is no longer held by this holder (force-released, or expired and taken)", pglock.ErrLockLost, lk.name))
		if lost := lk.Err(); lost != nil {
			return lost
		}
		return fmt.Errorf("%w: %q was released", pglock.ErrNotHeld, lk.name)
	}
	return fmt.Errorf("pglock: extend %q: %w", lk.name, err)
}

// takeTurn waits for the renewal under way, if any, to end, unless ctx ends first.
func (lk *Lock) takeTurn(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("pglock: extend %q: %w", lk.name, contextError(ctx))
	}
	select {
	case lk.renewing <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pglock: extend %q: waiting for the renewal under way: %w", lk.name, contextError(ctx))
	}
}

// contextError is why ctx ended: its error, and its cause when that is another.
func contextError(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("%w: %w", ctx.Err(), cause)
	}
	return ctx.Err()
}

// signalChange moves the timers to the deadline and timing as they now are. Called with mu
// held. While renewals are failing, the retry already scheduled stands.
func (lk *Lock) signalChange() {
	if lk.released || lk.lostCtx.Err() != nil || lk.loss == nil {
		return // no longer kept, or not yet (keep sets the timers from the state it finds)
	}
	lk.loss.Reset(time.Until(lk.deadline))
	if lk.failures == 0 {
		lk.scheduleRenewal(nextRenewal(lk.timing, lk.deadline))
	}
}

// scheduleRenewal sets the next heartbeat d from now. Called with mu held.
func (lk *Lock) scheduleRenewal(d time.Duration) {
	switch {
	case lk.timing.heartbeat == 0:
		if lk.renewal != nil {
			lk.renewal.Stop()
		}
	case lk.renewal == nil:
		lk.renewal = time.AfterFunc(d, lk.heartbeat)
	default:
		lk.renewal.Reset(d)
	}
}

// stopTimers ends the keeping. Called with mu held.
func (lk *Lock) stopTimers() {
	if lk.loss != nil {
		lk.loss.Stop()
	}
	if lk.renewal != nil {
		lk.renewal.Stop()
	}
}

// lose declares the lock lost, once, unless it was released.
func (lk *Lock) lose(err error) {
	lk.mu.Lock()
	if lk.released || lk.lostCtx.Err() != nil {
		lk.mu.Unlock()
		return
	}
	lk.markLost(err)
	lk.stopTimers()
	lk.mu.Unlock()
	lk.l.forget(lk)
	lk.l.cfg.Logger.Error("pglock: lock lost", "lock", lk.name, "token", lk.token, "error", err)
	lk.l.emit(Event{Kind: EventLost, Name: lk.name, Token: lk.token, Held: time.Since(lk.heldFrom), Err: err})
}

func (lk *Lock) state() (timing, time.Time) {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	return lk.timing, lk.deadline
}

// keep starts the timers that keep the lock: a heartbeat that renews it (and never later than
// halfway to its deadline, which a lock handed over with an old queue place can be close to),
// retrying failures, and the loss of the lock at its deadline. Keeping ends when the lock is
// released, lost, or its Locker closed.
func (lk *Lock) keep() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released || lk.lostCtx.Err() != nil {
		return // Close took it between hold's registering it and this
	}
	lk.loss = time.AfterFunc(time.Until(lk.deadline), lk.deadlinePassed)
	lk.scheduleRenewal(nextRenewal(lk.timing, lk.deadline))
}

// deadlinePassed declares the lock lost, unless a renewal moved the deadline meanwhile.
func (lk *Lock) deadlinePassed() {
	if !lk.l.startBackground() {
		return // Close has released every lock it held
	}
	defer lk.l.wg.Done()
	lk.mu.Lock()
	t, early := lk.timing, time.Now().Before(lk.deadline)
	lk.mu.Unlock()
	if early {
		return // the renewal that moved the deadline has reset the timer
	}
	lk.lose(fmt.Errorf("%w: no renewal of %q succeeded within its TTL (%s) less the safety margin (%s)",
		pglock.ErrLockLost, lk.name, t.ttl, t.margin))
}

// heartbeat renews the lock; a success schedules the next heartbeat (renew moves the timers),
// a failure a retry with backoff.
func (lk *Lock) heartbeat() {
	if !lk.l.startBackground() {
		return
	}
	defer lk.l.wg.Done()
	t, deadline := lk.state()
	ctx, cancel := context.WithDeadline(lk.keepingCtx, deadline)
	err := lk.renew(ctx, nil)
	over := ctx.Err() != nil // released, Locker closed, or the deadline reached: the loss timer tells
	cancel()
	if err == nil || over || lk.Err() != nil {
		return
	}
	lk.mu.Lock()
	lk.failures++
	failures := lk.failures
	if !lk.released && lk.lostCtx.Err() == nil {
		// Never wait past half the time left, so that retries go on until the deadline.
		lk.scheduleRenewal(min(retryDelay(failures, t.heartbeat), nextRenewal(t, lk.deadline)))
	}
	lk.mu.Unlock()
	lk.l.cfg.Logger.Warn("pglock: renewal failed; retrying", "lock", lk.name, "failures", failures, "error", err)
	lk.l.emit(Event{Kind: EventRenewFailed, Name: lk.name, Token: lk.token, Err: err})
}

// nextRenewal is a heartbeat from now, or half the time left before deadline if that is sooner.
func nextRenewal(t timing, deadline time.Time) time.Duration {
	return max(0, min(t.heartbeat, time.Until(deadline)/2))
}

// retryDelay backs off from 10 ms, doubling, up to the heartbeat (or 1 s without one).
func retryDelay(failures int, heartbeat time.Duration) time.Duration {
	limit := heartbeat
	if limit == 0 {
		limit = time.Second
	}
	return jitter(min(10*time.Millisecond<<min(failures-1, 16), limit))
}
