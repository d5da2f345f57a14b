package tablelock

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/notify"
	"github.com/pglock/pglock/internal/retry"
)

// waiter is one Acquire call waiting for its lock.
type waiter struct {
	req     request
	handoff chan handoffNotice // the lock was handed to this waiter
	wake    chan struct{}      // something changed: poll now

	// While the Locker listens, the waiter's place is kept by the Locker's places Set, whose
	// statement also says until when the lock's holder has it (seen, on this process's clock).
	place    *lease.Keeper
	mu       sync.Mutex
	lockEnds time.Time
	// The holder last seen, by a poll or the Set, and its lease's end by the database's clock:
	// what a lock taken over after it expired counts its vacancy from.
	lastHolder  string
	lastExpires time.Time
}

// seen records until when the lock is held, as an answer about it said.
func (w *waiter) seen(ends time.Time) {
	w.mu.Lock()
	w.lockEnds = ends
	w.mu.Unlock()
}

// sawHolder records the lock's holder and its lease's end by the database's clock, as an
// answer about it said; an answer naming the same holder with an earlier end (a poll and the
// Set's statement overlapping) is not taken.
func (w *waiter) sawHolder(holder string, expiresAt time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if holder != "" && (holder != w.lastHolder || expiresAt.After(w.lastExpires)) {
		w.lastHolder, w.lastExpires = holder, expiresAt
	}
}

// vacancyBefore is how long the name had no live holder before a lease that began at
// acquiredAt, by the database's clock: from the end of the last lease seen of another holder.
func (w *waiter) vacancyBefore(acquiredAt time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lastHolder == "" || w.lastHolder == w.req.holder {
		return 0
	}
	return max(0, acquiredAt.Sub(w.lastExpires))
}

// holderEnds is until when the lock's holder has it, as last seen.
func (w *waiter) holderEnds() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lockEnds
}

// handoffNotice is the payload of NOTIFY pglock_handoff.
type handoffNotice struct {
	LockName     string    `json:"lock_name"`
	HolderID     string    `json:"holder_id"`
	FencingToken int64     `json:"fencing_token"`
	ExpiresAt    time.Time `json:"expires_at"`
}

// errWaitTimeout is the cause of a wait's context ending at AcquireOptions.WaitTimeout.
var errWaitTimeout = errors.New("wait timeout")

// wait polls and listens until req's lock is ours. Its queue place in the database is written
// by the polls; the lease of a lock handed over by a release counts from the start of the
// last poll that wrote that place, since the handoff can only have come after it.
func (l *Locker) wait(ctx context.Context, req request, timeout time.Duration) (*Lock, error) {
	ctx, done := l.waitContext(ctx, timeout)
	defer done()
	w, err := l.register(req)
	if err != nil {
		return nil, err
	}
	defer stopKeepingPlace(w)
	start := time.Now()
	var (
		queuedAt  time.Time // start of the last poll that wrote our place in the queue
		locked    *LockedError
		expiresIn time.Duration // the holder's lease left, as of checked
		checked   time.Time     // when the last answer was read, on this process's clock
		idlePolls int           // polls since something last woke us: the backoff grows with them
	)
	for {
		pollStart := time.Now()
		idlePolls++
		row, err := settled(l, ctx, req.timing.TTL,
			func(ctx context.Context) (db.PollLockRow, error) {
				return l.queries.PollLock(ctx, db.PollLockParams(req.params()))
			},
			// The poll is over: now leaving is final.
			func(db.PollLockRow, error) { l.leave(req.name, req.holder, req.timing.TTL, 0) })
		switch {
		case err == nil && row.Acquired:
			defer l.unregister(w) // after hold: if Close began, the release hold makes is counted
			// Taken, not handed over: from the end of the lease last seen, by a poll or by the
			// Set's statement (a listening waiter polls only once its place is kept), to the
			// start of this one.
			vacancy := w.vacancyBefore(row.ExpiresAt.Add(-req.timing.TTL))
			return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, pollStart, time.Since(start), vacancy)
		case err == nil:
			if row.Queued {
				queuedAt = pollStart
			}
			l.wakeLocalHolder(row.HolderID)
			locked = lockedError(req.name, row.HolderID, row.Instance, row.Metadata, row.ExpiresAt)
			w.sawHolder(row.HolderID, row.ExpiresAt)
			checked = time.Now()
			expiresIn = row.ExpiresAt.Sub(row.CheckedAt) + time.Millisecond
			w.seen(checked.Add(expiresIn))
			if !l.cfg.DisableNotifications && w.place == nil {
				// The poll wrote the place, or found it written less than a third of its TTL
				// ago: from then on, the places Set keeps it, and says what the lock does.
				written := queuedAt
				if !row.Queued {
					written = pollStart.Add(-req.timing.TTL / 3)
				}
				l.keepPlace(w, written, row.CheckedAt.Add(req.timing.TTL))
			}
		case ctx.Err() != nil: // settled also leaves the queue once a poll it gave up on is over
			l.abandon(w)
			return nil, l.waitError(ctx, req, start, timeout, locked)
		case !retry.Transient(err):
			l.abandon(w)
			return nil, errs.Errorf("acquire %q: %w", req.name, err)
		default:
			l.cfg.Logger.Debug("pglock: poll failed; retrying", "lock", req.name, "error", err)
		}

		handoff, woken, err := l.sleep(ctx, w, l.pollDelay(w, idlePolls, expiresIn-time.Since(checked)))
		if err != nil {
			l.abandon(w)
			return nil, l.waitError(ctx, req, start, timeout, locked)
		}
		if woken {
			idlePolls = 0
		}
		// The lease of a lock handed over counts from the last write of our place, which can be
		// old. With less than half of it left by that count (or no count, if we never learned
		// when the place was written), poll instead: the poll finds the lock ours and renews it
		// from its own start.
		if w.place != nil {
			// The place's last renewal wrote it too, maybe after the poll's.
			if renewed := w.place.Deadline().Add(-(req.timing.TTL - req.timing.Margin)); renewed.After(queuedAt) {
				queuedAt = renewed
			}
		}
		if handoff != nil && !queuedAt.IsZero() {
			usable := req.timing.TTL - req.timing.Margin
			if time.Until(queuedAt.Add(usable)) > usable/2 {
				defer l.unregister(w)
				return l.hold(ctx, req, handoff.FencingToken, handoff.ExpiresAt, queuedAt, time.Since(start), 0)
			}
		}
	}
}

// sleep waits for something that calls for a poll: a handoff to w (returned), a wake-up
// (woken), its place lost, ctx's end (its error), or delay. While the places Set keeps w's
// place, delay is ignored: w sleeps until the holder's lease could end, as the Set last saw it,
// and polls only then, or when told.
func (l *Locker) sleep(ctx context.Context, w *waiter, delay time.Duration) (_ *handoffNotice, woken bool, _ error) {
	var placeLost <-chan struct{}
	if w.place != nil {
		placeLost = w.place.Lost()
	}
	for {
		if w.place != nil {
			delay = max(time.Until(w.holderEnds()), 0)
		}
		timer := time.NewTimer(delay)
		select {
		case h := <-w.handoff:
			timer.Stop()
			return &h, false, nil
		case <-w.wake:
			timer.Stop()
			select { // a wake-up and the handoff it announces can come together: the handoff saves a poll
			case h := <-w.handoff:
				return &h, true, nil
			default:
				return nil, true, nil
			}
		case <-placeLost:
			timer.Stop()
			w.place = nil // the next poll writes it again
			return nil, true, nil
		case <-timer.C:
			if w.place != nil && time.Until(w.holderEnds()) > 0 {
				continue // the holder renewed meanwhile, the Set saw it
			}
			return nil, false, nil
		case <-ctx.Done():
			timer.Stop()
			return nil, false, ctx.Err()
		}
	}
}

// keepPlace has the places Set keep w's place, written at written (or later) until expiresAt
// by the database's clock.
func (l *Locker) keepPlace(w *waiter, written, expiresAt time.Time) {
	timing := w.req.timing
	if timing.Heartbeat == 0 { // the lock will not be renewed by heartbeats, but its place must be
		timing.Heartbeat = timing.TTL / 3
	}
	w.place = lease.New(lease.Config{
		Name: "place of " + w.req.holder + " in the queue of " + w.req.name, Timing: timing,
		Start: written, ExpiresAt: expiresAt, Ctx: l.ctx, Tracker: (*background)(l), Set: l.places, Ref: w,
	})
	w.place.Start()
}

// stopKeepingPlace ends the keeping of w's place, if the Set keeps it.
func stopKeepingPlace(w *waiter) {
	if w.place != nil {
		w.place.Stop()
	}
}

// keepPlaces keeps the places of waiters in one statement, and wakes those whose lock is free,
// theirs, or past its lease, as the statement saw it.
func (l *Locker) keepPlaces(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	p := db.WaitManyParams{LockNames: make([]string, len(due)), HolderIds: make([]string, len(due)), TtlMs: make([]int64, len(due))}
	waiters := make([]*waiter, len(due))
	for i, d := range due {
		w := d.Ref.(*waiter)
		waiters[i] = w
		p.LockNames[i], p.HolderIds[i], p.TtlMs[i] = w.req.name, w.req.holder, d.TTL.Milliseconds()
	}
	rows, err := l.queries.WaitMany(ctx, p)
	now := time.Now()
	for i, r := range rows {
		w := waiters[i]
		if strings.HasPrefix(w.req.name, SemaphorePrefix) {
			// A semaphore's queue has no lock row to read, and a place freed by expiry sends no
			// notification: the first local waiter of the semaphore looks at every tick (and wakes
			// the local waiter its poll finds next in line: AcquirePlaces).
			if l.isHead(w) {
				wake(w)
			}
			continue
		}
		ends := now.Add(r.LockExpiresAt.Sub(r.CheckedAt))
		w.seen(ends)
		w.sawHolder(r.LockHolderID, r.LockExpiresAt)
		if r.LockHolderID == "" || r.LockHolderID == w.req.holder || !ends.After(now) {
			wake(w)
		}
	}
	return lease.Outcomes(rows, err, func(r db.WaitManyRow) (string, time.Time) {
		if r.Outcome == "kept" {
			return "renewed", r.ExpiresAt
		}
		return r.Outcome, r.ExpiresAt
	})
}

// waitContext is the context of a wait: it ends at timeout (when positive, with cause
// errWaitTimeout), and when Close begins (with cause [pglock.ErrClosed]), whatever the caller's
// ctx, canceling a poll under way too. Call done when the wait is over.
func (l *Locker) waitContext(ctx context.Context, timeout time.Duration) (_ context.Context, done func()) {
	cancelTimeout := context.CancelFunc(func() {})
	if timeout > 0 {
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, timeout, errWaitTimeout)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.closing, func() { cancel(pglock.ErrClosed) })
	return ctx, func() { stop(); cancel(nil); cancelTimeout() }
}

// wakeLocalHolder wakes holder if it is one of this Locker's waiters: a poll of another waiter
// found the lock handed to it (or kept for it), which it would otherwise learn only from a
// notification, or from a poll of its own up to a third of its TTL away.
func (l *Locker) wakeLocalHolder(holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.byHolder[holder]; ok {
		wake(w)
	}
}

// waitError is the error of a wait whose ctx ended, reported as an event too. A wait that ran
// out of time matches [pglock.ErrLockTimeout], as in every pglock package.
func (l *Locker) waitError(ctx context.Context, req request, start time.Time, timeout time.Duration, locked *LockedError) error {
	cause := context.Cause(ctx)
	var err error
	switch {
	case errors.Is(cause, errWaitTimeout):
		err = errs.Errorf("acquire %q: waited %s: %w: %w", req.name, timeout, pglock.ErrLockTimeout, lockedOrPlain(locked))
	case errors.Is(cause, context.DeadlineExceeded):
		err = errs.Errorf("acquire %q: %w: %w", req.name, pglock.ErrLockTimeout, cause)
	default:
		err = errs.Errorf("acquire %q: %w", req.name, cause)
	}
	return err
}

func lockedOrPlain(locked *LockedError) error {
	if locked == nil {
		return pglock.ErrLocked
	}
	return locked
}

// pollDelay is how long a waiter sleeps unless woken. The first local waiter of a name polls
// with capped exponential backoff and when the holder's lease ends; the others only rewrite
// their place in the queue, every third of their TTL, and rely on being handed the lock.
// Backed off to MaxPollInterval, a waiter polls no more often than that: spread above it, not
// below, so that many waiters (candidates of one election, each the first of its own process)
// cost at most one query each per MaxPollInterval.
func (l *Locker) pollDelay(w *waiter, idlePolls int, untilExpiry time.Duration) time.Duration {
	refresh := w.req.timing.TTL / 3
	if !l.isHead(w) {
		return backoff.Jitter(refresh)
	}
	delay := min(10*time.Millisecond<<min(idlePolls-1, 16), l.cfg.MaxPollInterval, refresh)
	if untilExpiry > 0 && untilExpiry < delay {
		return untilExpiry
	}
	if delay == l.cfg.MaxPollInterval && delay < refresh {
		// Over [d, d+d/8]: never sooner, and apart; never past the holder's lease.
		spread := delay + rand.N(delay/8+1)
		if untilExpiry > 0 {
			spread = min(spread, untilExpiry)
		}
		return spread
	}
	return backoff.Jitter(delay)
}

func (l *Locker) register(req request) (*waiter, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errs.Errorf("acquire %q: %w", req.name, pglock.ErrClosed)
	}
	w := &waiter{req: req, handoff: make(chan handoffNotice, 1), wake: make(chan struct{}, 1)}
	l.queues[req.name] = append(l.queues[req.name], w)
	l.byHolder[req.holder] = w
	l.waits.Add(1)
	if !l.cfg.DisableNotifications && l.unsubscribe == nil {
		l.subscribe()
	}
	return w, nil
}

// unregister removes w from the local queues, and ends its count in l.waits.
func (l *Locker) unregister(w *waiter) {
	l.mu.Lock()
	l.dequeueLocked(w)
	delete(l.byHolder, w.req.holder)
	l.mu.Unlock()
	l.waits.Done()
}

// dequeueLocked removes w from the local queue of its name, waking the next waiter if w was the
// first. Called with l.mu held.
func (l *Locker) dequeueLocked(w *waiter) {
	queue := l.queues[w.req.name]
	wasHead := len(queue) > 0 && queue[0] == w
	queue = slices.DeleteFunc(queue, func(other *waiter) bool { return other == w })
	if len(queue) == 0 {
		delete(l.queues, w.req.name)
	} else {
		l.queues[w.req.name] = queue
		if wasHead {
			wake(queue[0])
		}
	}
}

// abandon ends w's wait, leaving the queue in the database and the local one, in that order:
// leaving is counted in l.waits while w's own count still holds, so Close cannot miss it.
func (l *Locker) abandon(w *waiter) {
	l.leave(w.req.name, w.req.holder, w.req.timing.TTL, 0)
	l.unregister(w)
}

// leave releases name for holder in the background, so that the caller returns at once: its
// place in the database's queue, and the lock if it was handed over (or taken) meanwhile.
// Transient failures are retried with backoff until ttl has passed, when the place or lease
// has run out anyway, or the Locker has stopped. The caller must hold a count in l.waits, or
// l.mu with the Locker not closed.
func (l *Locker) leave(name, holder string, ttl, held time.Duration) {
	l.inBackground(name, ttl, func(ctx context.Context) error {
		// A handoff to us that commits while this runs is released too (pglock_release).
		_, err := l.releaseRow(ctx, name, holder, held)
		return err
	})
}

// inBackground runs release, a release of what name says, in the background, retrying
// transient failures as leave does (see there for when it may run).
func (l *Locker) inBackground(name string, ttl time.Duration, release func(context.Context) error) {
	l.waits.Add(1)
	go func() {
		defer l.waits.Done()
		ctx, cancel := context.WithTimeout(l.ctx, ttl)
		defer cancel()
		for failures := 1; ; failures++ {
			err := release(ctx)
			if err == nil {
				return
			}
			if retry.Transient(err) && ctx.Err() == nil && lease.RetryBackoff(time.Second).Sleep(ctx, clock.Real, failures) {
				continue
			}
			l.cfg.Logger.Warn("pglock: could not release in the background; the lock or place expires with its TTL",
				"lock", name, "error", err)
			return
		}
	}()
}

// releaseRow releases holder's lock (or place) on name at once, or once held since it was
// acquired (ReleaseAfter), and says whether holder had it.
func (l *Locker) releaseRow(ctx context.Context, name, holder string, held time.Duration) (bool, error) {
	if held > 0 {
		row, err := l.queries.ReleaseLockAfter(ctx, db.ReleaseLockAfterParams{LockName: name, HolderID: holder,
			HeldMs: (held + time.Millisecond - 1).Milliseconds()})
		return row.Released, err
	}
	row, err := l.queries.ReleaseLock(ctx, db.ReleaseLockParams{LockName: name, HolderID: holder})
	return row.Released, err
}

func (l *Locker) isHead(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	queue := l.queues[w.req.name]
	return len(queue) > 0 && queue[0] == w
}

func wake(w *waiter) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// subscribe has the pool's listener (one per pool in the process, shared with every other
// user of the pool) deliver releases and handoffs. Called with l.mu held, once.
func (l *Locker) subscribe() {
	listener := l.cfg.ListenerConnConfig
	l.unsubscribe = []func(){
		notify.Subscribe(l.pool, listener, l.cfg.Logger, db.HandoffChannel, notify.Handler{Notify: l.handedOff}),
		// Listening: anything released while the listener was not listening.
		notify.Subscribe(l.pool, listener, l.cfg.Logger, db.ReleasedChannel, notify.Handler{Notify: l.released, Listening: l.wakeHeads}),
	}
}

// handedOff wakes the new holder a handoff names, if it is one of this Locker's waiters.
func (l *Locker) handedOff(payload string) {
	var h handoffNotice
	if err := json.Unmarshal([]byte(payload), &h); err != nil {
		l.cfg.Logger.Warn("pglock: unreadable handoff notification", "payload", payload, "error", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.byHolder[h.HolderID]; ok {
		select {
		case w.handoff <- h:
		default:
		}
	}
}

// released wakes the first local waiter of a lock freed with nobody waiting, or of the
// semaphore a released place belonged to.
func (l *Locker) released(name string) {
	if queue, ok := SemaphoreQueue(name); ok {
		name = queue
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if queue := l.queues[name]; len(queue) > 0 {
		wake(queue[0])
	}
}

func (l *Locker) wakeHeads() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, queue := range l.queues {
		wake(queue[0])
	}
}
