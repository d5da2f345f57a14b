package tablelock

import (
	"cmp"
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

// Places is what an acquisition of a semaphore's places takes: Take of its Permits places,
// counted against Key, of which at most PerKey places are held at once.
//
// A semaphore serves its queue in turns. A waiter's turn, given when it queues, follows the
// places its key's earlier waiters want, and is no earlier than the queue's first turn or the
// end of the latest turn admitted; waiters are served by turn, then arrival. So within a key
// the order is arrival, strictly: a request is admitted only if every live waiter of its key
// queued before it fits too, and a waiter for 3 places is never overtaken by a stream of
// 1-place requests of its key. Across keys the turns alternate, weighted by places: one key's
// 10,000 waiters delay another key's first by at most a turn. A waiter whose key is at its cap is passed over; every
// other keeps its room from those after it. Callers of one semaphore should agree on Permits
// and PerKey: each attempt judges the whole queue by its own.
type Places struct {
	Permits int    // the semaphore's places in all: from 1
	Take    int    // places this acquisition takes, at most Permits and PerKey; 0 means 1
	Key     string // the key (a tenant) the places count against; "" is a key like any other
	PerKey  int    // places one key may hold at once; 0 means no cap
}

// TryAcquireSemaphore is TryAcquirePlaces of one of permits places, with no key.
func (l *Locker) TryAcquireSemaphore(ctx context.Context, name string, permits int, opts *AcquireOptions) (*Lock, error) {
	return l.TryAcquirePlaces(ctx, name, Places{Permits: permits}, opts)
}

// AcquireSemaphore is AcquirePlaces of one of permits places, with no key.
func (l *Locker) AcquireSemaphore(ctx context.Context, name string, permits int, opts *AcquireOptions) (*Lock, error) {
	return l.AcquirePlaces(ctx, name, Places{Permits: permits}, opts)
}

// TryAcquirePlaces takes p.Take of the places of the semaphore name, in one round trip (once
// any attempt this Locker has under way on name is done), if they are free and nobody queued
// ahead would be left out (see [Places]); otherwise it returns an
// error matching [pglock.ErrLocked]. The places are a *Lock like any other: renewed, lost,
// fenced and released as a table lock is, with a token from the same sequence. Its Name is its
// row's, "pglock.semaphore/<name>/<holder>", as pglockctl list shows it. Changing Permits or
// PerKey for a name applies to later acquisitions; holders keep their places. Places out of
// range match [pglock.ErrInvalidArgument], and write nothing.
func (l *Locker) TryAcquirePlaces(ctx context.Context, name string, p Places, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveSemaphore, name, false, time.Now(), &lk, &err)
	}
	req, err := l.semaphoreRequest(name, &p, opts)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	row, err := l.takePlaces(ctx, name, p, req, false)
	if err != nil {
		if ctx.Err() != nil || retry.Transient(err) {
			l.leaveSemaphore(name, req) // it may have taken places unseen
		}
		return nil, errs.Errorf("acquire semaphore %q: %w", name, err)
	}
	if !row.Acquired {
		return nil, errs.Errorf("%w: semaphore %q has %d of %d places taken", pglock.ErrLocked, name, row.Holders, p.Permits)
	}
	return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, start, 0, 0)
}

// AcquirePlaces waits until it holds p.Take of the places of the semaphore name, ctx is done,
// opts.WaitTimeout has passed, or the Locker is closed, as Acquire does: waiters are served in
// the queue's order (see [Places]), across all processes, woken when places are released.
func (l *Locker) AcquirePlaces(ctx context.Context, name string, p Places, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveSemaphore, name, true, time.Now(), &lk, &err)
	}
	req, err := l.semaphoreRequest(name, &p, opts)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if opts != nil {
		timeout = opts.WaitTimeout
	}
	ctx, done := l.waitContext(ctx, timeout)
	defer done()
	// Registered under the queue's name: released places wake the first local waiter.
	queue := req
	queue.name = SemaphorePrefix + name
	w, err := l.register(queue)
	if err != nil {
		return nil, err
	}
	defer stopKeepingPlace(w)
	start := time.Now()
	// Polls rewrite the queue place, which lives a TTL: never further apart than a third of it.
	polling := backoff.Capped{First: 10 * time.Millisecond, Max: min(l.cfg.MaxPollInterval, req.timing.TTL/3)}
	for polls := 1; ; polls++ {
		pollStart := time.Now()
		row, err := l.takePlaces(ctx, name, p, req, true)
		if err == nil {
			// Other waiters would be admitted now: those that are ours poll at once (the others'
			// Lockers' first waiters, polling on the release's notification or a tick, wake them).
			for _, next := range row.NextHolderIds {
				l.wakeLocalHolder(next)
			}
		}
		switch {
		case err == nil && row.Acquired:
			defer l.unregister(w)
			return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, pollStart, time.Since(start), 0)
		case err == nil:
			// A semaphore has no one lease whose end to wait for: with its place kept, a waiter
			// sleeps until woken, by a release (its Locker's first waiter), by a poll that found it
			// next in line, or by the places Set's tick (the first waiter: keepPlaces); and, in case
			// no poll could see it (behind the rows a poll reads of a long queue), it polls on its
			// own every 1.5 to 3 TTLs. Were each to poll every TTL, 2,000 waiters would poll 200
			// times a second for nothing.
			w.seen(time.Now().Add(backoff.Jitter(3 * req.timing.TTL)))
			if !l.cfg.DisableNotifications && w.place == nil {
				// The poll wrote the place, for a TTL from the answer's time: from then on the
				// places Set keeps it.
				l.keepPlace(w, pollStart, row.ExpiresAt.Add(req.timing.TTL))
			}
		case ctx.Err() != nil:
			l.abandonSemaphore(w, name, req)
			return nil, l.waitError(ctx, queue, start, timeout, nil)
		case !retry.Transient(err):
			l.abandonSemaphore(w, name, req)
			return nil, errs.Errorf("acquire semaphore %q: %w", name, err)
		}
		_, woken, err := l.sleep(ctx, w, polling.Delay(polls))
		if err != nil {
			l.abandonSemaphore(w, name, req)
			return nil, l.waitError(ctx, queue, start, timeout, nil)
		}
		if woken {
			polls = 0
		}
	}
}

// semaphoreRequest checks an acquisition of places of semaphore name, and sets p.Take's
// default: req.name is the row the places will be.
func (l *Locker) semaphoreRequest(name string, p *Places, opts *AcquireOptions) (request, error) {
	if err := checkPlaces(name, p); err != nil {
		return request{}, err
	}
	req, err := l.newRequest(name, opts) // checks the name, the options, and mints the holder id
	if err != nil {
		return request{}, err
	}
	if err := checkPlaceName(name, req.holder); err != nil {
		return request{}, err
	}
	req.name = SemaphorePrefix + name + "/" + req.holder
	req.primitive = pglock.PrimitiveSemaphore
	req.places = p.Take
	return req, nil
}

// checkPlaces checks p, places of semaphore name, and sets p.Take's default.
func checkPlaces(name string, p *Places) error {
	if strings.Contains(name, "/") {
		return errs.Errorf("%w: semaphore name %q has a '/'", pglock.ErrInvalidName, name)
	}
	if p.Take == 0 {
		p.Take = 1
	}
	const maxPlaces = 1<<31 - 1
	switch {
	case p.Permits < 1 || p.Permits > maxPlaces:
		return errs.Errorf("%w: permits %d must be from 1 to %d", pglock.ErrInvalidArgument, p.Permits, maxPlaces)
	case p.PerKey < 0 || p.PerKey > maxPlaces:
		return errs.Errorf("%w: PerKey %d must be from 1 to %d, or 0 for no cap", pglock.ErrInvalidArgument, p.PerKey, maxPlaces)
	case p.Take < 1 || p.Take > p.Permits || (p.PerKey > 0 && p.Take > p.PerKey):
		return errs.Errorf("%w: %d places of a semaphore of %d with at most %d a key", pglock.ErrInvalidArgument,
			p.Take, p.Permits, cmp.Or(p.PerKey, p.Permits))
	}
	if p.Key != "" {
		if err := pglock.ValidateName(p.Key); err != nil {
			return errs.Errorf("semaphore key: %w", err)
		}
	}
	return nil
}

// checkPlaceName checks that semaphore name is a name, and that holder's places of it have one.
func checkPlaceName(name, holder string) error {
	if err := pglock.ValidateName(name); err != nil {
		return err
	}
	if len(SemaphorePrefix+name+"/"+holder) > pglock.MaxNameLen {
		return errs.Errorf("%w: semaphore name of %d bytes: its places are named %q + name + \"/\" + a 32-character holder, at most %d bytes",
			pglock.ErrInvalidName, len(name), SemaphorePrefix, pglock.MaxNameLen)
	}
	return nil
}

// takePlaces is one attempt on semaphore name. A Locker's attempts on one semaphore take turns:
// the database serializes them anyway (its advisory lock), and 500 waiters polling at once would
// otherwise each hold one of the pool's connections while they queue for it, leaving none for
// the renewals of leases and places.
func (l *Locker) takePlaces(ctx context.Context, name string, p Places, req request, wait bool) (db.TakeSemaphoreRow, error) {
	leave, err := l.pollTurn(ctx, name)
	if err != nil {
		return db.TakeSemaphoreRow{}, err
	}
	defer leave()
	return l.queries.TakeSemaphore(ctx, db.TakeSemaphoreParams{
		Semaphore: name, HolderID: req.holder, Places: int32(p.Take), Permits: int32(p.Permits), Key: p.Key,
		PerKey: int32(p.PerKey), TtlMs: req.timing.TTL.Milliseconds(), Metadata: req.encoded, Instance: req.instance, Wait: wait,
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

// pollTurn is the turn of a Locker's attempts on one semaphore: one at a time.
type pollTurn struct {
	turn  chan struct{}
	users int // attempts holding or awaiting the turn: the entry goes with the last
}

// pollTurn waits for the turn of this Locker's attempts on semaphore name, or ctx's end, and
// returns what gives it up.
func (l *Locker) pollTurn(ctx context.Context, name string) (leave func(), err error) {
	l.mu.Lock()
	t := l.polling[name]
	if t == nil {
		t = &pollTurn{turn: make(chan struct{}, 1)}
		l.polling[name] = t
	}
	t.users++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if t.users--; t.users == 0 {
			delete(l.polling, name)
		}
		l.mu.Unlock()
	}
	select {
	case t.turn <- struct{}{}:
		return func() { <-t.turn; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
