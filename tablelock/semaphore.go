package tablelock

import (
	"context"
	"strings"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/retry"
)

// SemaphorePrefix starts the names of a semaphore's queue ("pglock.semaphore/<name>") and of
// its holders' places ("pglock.semaphore/<name>/<holder>"): names reserved for semaphores.
const SemaphorePrefix = "pglock.semaphore/"

// TryAcquireSemaphore takes one of permits places of the semaphore name, in one round trip,
// if fewer than permits are held and nobody waits ahead; otherwise it returns an error
// matching [pglock.ErrLocked]. A place is a *Lock like any other: renewed, lost, fenced and
// released as a table lock is, with a token from the same sequence. Its Name is its row's,
// "pglock.semaphore/<name>/<holder>", as pglockctl list shows it. Changing permits for a name
// applies to later acquisitions; holders keep their places.
func (l *Locker) TryAcquireSemaphore(ctx context.Context, name string, permits int, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveSemaphore, name, false, time.Now(), &lk, &err)
	}
	req, err := l.semaphoreRequest(name, permits, opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	row, err := l.attemptSemaphore(ctx, name, permits, req, false)
	if err != nil {
		if ctx.Err() != nil || retry.Transient(err) {
			l.leaveSemaphore(name, req) // it may have taken a place unseen
		}
		return nil, errs.Errorf("acquire semaphore %q: %w", name, err)
	}
	if !row.Acquired {
		return nil, errs.Errorf("%w: semaphore %q has %d of %d places taken", pglock.ErrLocked, name, row.Holders, permits)
	}
	return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, start, 0, 0)
}

// AcquireSemaphore waits until it holds one of permits places of the semaphore name, ctx is
// done, opts.WaitTimeout has passed, or the Locker is closed, as Acquire does: waiters are
// served in the order they queued, across all processes, woken when a place is released.
func (l *Locker) AcquireSemaphore(ctx context.Context, name string, permits int, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveSemaphore, name, true, time.Now(), &lk, &err)
	}
	req, err := l.semaphoreRequest(name, permits, opts)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if opts != nil {
		timeout = opts.WaitTimeout
	}
	ctx, done := l.waitContext(ctx, timeout)
	defer done()
	// Registered under the queue's name: a released place wakes the first local waiter.
	queue := req
	queue.name = SemaphorePrefix + name
	w, err := l.register(queue)
	if err != nil {
		return nil, err
	}
	defer stopKeepingPlace(w)
	start := time.Now()
	// Polls rewrite the queue place, which lives a TTL: never further apart than a third of it.
	backoff := backoff.Capped{First: 10 * time.Millisecond, Max: min(l.cfg.MaxPollInterval, req.timing.TTL/3)}
	for polls := 1; ; polls++ {
		pollStart := time.Now()
		row, err := l.attemptSemaphore(ctx, name, permits, req, true)
		switch {
		case err == nil && row.Acquired:
			defer l.unregister(w)
			return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, pollStart, time.Since(start), 0)
		case err == nil:
			// A semaphore has no one lease whose end to wait for: with its place kept, a waiter
			// sleeps until woken (see keepPlaces).
			w.seen(time.Now().Add(req.timing.TTL))
			if !l.cfg.DisableNotifications && w.place == nil {
				// The poll wrote the place, for a TTL from the answer's time: from then on the
				// places Set keeps it.
				l.keepPlace(w, pollStart, row.ExpiresAt.Add(req.timing.TTL))
			}
			if w.place != nil && row.Holders < int32(permits) && l.isHead(w) {
				// Room, but places queued ahead of this one take it. Those may be this Locker's
				// other waiters, asleep while the Set keeps their places: their order here is
				// the order they began, not the queue's (a place lost and written again goes to
				// the back). Without notifications, each polls on its own backoff anyway.
				l.wakeBehind(w)
			}
		case ctx.Err() != nil:
			l.abandonSemaphore(w, name, req)
			return nil, l.waitError(ctx, queue, start, timeout, nil)
		case !retry.Transient(err):
			l.abandonSemaphore(w, name, req)
			return nil, errs.Errorf("acquire semaphore %q: %w", name, err)
		}
		_, woken, err := l.sleep(ctx, w, backoff.Delay(polls))
		if err != nil {
			l.abandonSemaphore(w, name, req)
			return nil, l.waitError(ctx, queue, start, timeout, nil)
		}
		if woken {
			polls = 0
		}
	}
}

// semaphoreRequest checks an acquisition of a place of semaphore name: req.name is the row
// the place will be.
func (l *Locker) semaphoreRequest(name string, permits int, opts *AcquireOptions) (request, error) {
	if strings.Contains(name, "/") {
		return request{}, errs.Errorf("%w: semaphore name %q has a '/'", pglock.ErrInvalidName, name)
	}
	if permits < 1 || permits > 1<<31-1 {
		return request{}, errs.Errorf("%w: permits %d must be from 1 to %d", pglock.ErrInvalidArgument, permits, 1<<31-1)
	}
	req, err := l.newRequest(name, opts) // checks the name, the options, and mints the holder id
	if err != nil {
		return request{}, err
	}
	req.name = SemaphorePrefix + name + "/" + req.holder
	req.primitive = pglock.PrimitiveSemaphore
	if len(req.name) > pglock.MaxNameLen {
		return request{}, errs.Errorf("%w: semaphore name of %d bytes: its places are named %q + name + \"/\" + a 32-character holder, at most %d bytes",
			pglock.ErrInvalidName, len(name), SemaphorePrefix, pglock.MaxNameLen)
	}
	return req, nil
}

func (l *Locker) attemptSemaphore(ctx context.Context, name string, permits int, req request, wait bool) (db.AttemptSemaphoreRow, error) {
	return l.queries.AttemptSemaphore(ctx, db.AttemptSemaphoreParams{
		Semaphore: name, HolderID: req.holder, Permits: int32(permits), TtlMs: req.timing.TTL.Milliseconds(),
		Metadata: req.encoded, Instance: req.instance, Wait: wait,
	})
}

// leaveSemaphore gives up, in the background, the place in name's queue and the place held if
// an attempt took one unseen.
func (l *Locker) leaveSemaphore(name string, req request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.leaveBoth(name, req)
}

// abandonSemaphore ends w's wait: leaving is counted in l.waits while w's own count holds.
func (l *Locker) abandonSemaphore(w *waiter, name string, req request) {
	l.leaveBoth(name, req)
	l.unregister(w)
}

// leaveBoth leaves name's queue and the place req may hold (see leave for when it may run).
func (l *Locker) leaveBoth(name string, req request) {
	l.leave(SemaphorePrefix+name, req.holder, req.timing.TTL, 0)
	l.leave(req.name, req.holder, req.timing.TTL, 0)
}

// semaphoreQueue is the queue of the semaphore whose place rowName is, if it is one.
func SemaphoreQueue(rowName string) (string, bool) {
	if !strings.HasPrefix(rowName, SemaphorePrefix) {
		return "", false
	}
	i := strings.LastIndexByte(rowName, '/')
	if i < len(SemaphorePrefix) {
		return "", false
	}
	return rowName[:i], true
}
