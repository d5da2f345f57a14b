package tablelock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/observe"
	"github.com/pglock/pglock/internal/retry"
)

// Resource is one of the things a combined acquisition takes: the table lock Lock or, with
// Semaphore set instead, Places of that semaphore.
type Resource struct {
	Lock      string
	Semaphore string
	Places    Places
}

// MaxResources is how many resources one combined acquisition takes at most.
const MaxResources = 64

// Held is one resource a combined acquisition holds.
type Held struct {
	Resource        // as asked, with Places.Take's default set
	Name     string // its row: the lock's name, or the places' "pglock.semaphore/<name>/<holder>"
	Token    int64  // its fencing token, from the sequence of every lock's
}

// Locks is what a combined acquisition holds: every resource asked for, under one lease (one
// TTL, renewed for all in one statement, lost as one), each with its own fencing token. Its
// methods are safe for concurrent use.
type Locks struct {
	l        *Locker
	c        *combined
	ctx      context.Context // the acquisition's, for its observer
	label    string
	holder   string
	held     []Held
	rows     []string // the held rows in canonical order, as statements take them
	tokens   []int64  // their tokens, in that order
	heldFrom time.Time
	lease    *lease.Keeper
}

// TryAcquireAll takes every resource of rs, all of them or none, in one statement, in canonical
// order (see AcquireAll), or returns an error matching [pglock.ErrLocked] naming the first that
// refused; then what it took is undone in the statement.
func (l *Locker) TryAcquireAll(ctx context.Context, rs []Resource, opts *AcquireOptions) (ls *Locks, err error) {
	c, err := l.newCombined(rs, opts)
	if err != nil {
		return nil, err
	}
	if l.events != nil {
		defer l.observeAcquireAll(ctx, c.req.label, false, time.Now(), &ls, &err)
	}
	// Counted in l.waits, so that Close waits for what it may have taken.
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errs.Errorf("acquire %s: %w", c.req.label, pglock.ErrClosed)
	}
	l.waits.Add(1)
	l.mu.Unlock()
	defer l.waits.Done()
	start := time.Now()
	row, err := l.takeAll(ctx, c, false)
	if err != nil {
		if ctx.Err() != nil || retry.Transient(err) {
			l.leaveAll(c) // it may have taken them unseen
		}
		return nil, errs.Errorf("acquire %s: %w", c.req.label, err)
	}
	if !row.Acquired {
		return nil, errs.Errorf("%w: %s: %q refused", pglock.ErrLocked, c.req.label, row.WaitingFor)
	}
	return l.holdAll(ctx, c, row, start)
}

// AcquireAll waits until it holds every resource of rs, ctx is done, opts.WaitTimeout has
// passed, or the Locker is closed; it returns all of them or none. Resources are taken in
// canonical order (by name; a semaphore's counts as "pglock.semaphore/<name>"), each judged as a
// single acquisition of it would be, waiters queued ahead included. Each poll is one statement
// and ordered locking: it takes, or keeps, the resources before the first that refuses it, and
// keeps a place in that one's queue, as a single waiter does; so it keeps its turn at every
// resource it has reached, and, as a caller holds only resources before the one it waits for, no
// two combined acquisitions ever wait for each other in a cycle. Giving up (ctx, WaitTimeout,
// Close) gives back everything. The resources, once held, share one lease: renewed together,
// lost together (Lost), released together. A resource listed twice, none, more than
// MaxResources, or one that a single acquisition would refuse matches
// [pglock.ErrInvalidArgument] or [pglock.ErrInvalidName], and writes nothing.
func (l *Locker) AcquireAll(ctx context.Context, rs []Resource, opts *AcquireOptions) (ls *Locks, err error) {
	c, err := l.newCombined(rs, opts)
	if err != nil {
		return nil, err
	}
	if l.events != nil {
		defer l.observeAcquireAll(ctx, c.req.label, true, time.Now(), &ls, &err)
	}
	var timeout time.Duration
	if opts != nil {
		timeout = opts.WaitTimeout
	}
	ctx, done := l.waitContext(ctx, timeout)
	defer done()
	// Registered, as a single waiter is, under the name of the resource it waits for: a release
	// of it wakes the first local waiter, a handoff of a lock its new holder.
	queue := c.req
	queue.name = c.leaving[0]
	w, err := l.register(queue)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	// A poll rewrites the caller's place, and renews what it holds while it waits, which live a
	// TTL: never further apart than a third of it.
	polling := backoff.Capped{First: 10 * time.Millisecond, Max: min(l.cfg.MaxPollInterval, c.req.timing.TTL/3)}
	repolled := false
	for polls := 1; ; polls++ {
		pollStart := time.Now()
		row, err := settled(l, ctx, c.req.timing.TTL,
			func(ctx context.Context) (db.TakeAllRow, error) { return l.takeAll(ctx, c, true) },
			func(db.TakeAllRow, error) { l.leaveAll(c) })
		if err == nil {
			// Other waiters of its semaphores would be admitted now: those that are ours poll.
			for _, next := range row.NextHolderIds {
				l.wakeLocalHolder(next)
			}
		}
		switch {
		case err == nil && row.Acquired:
			defer l.unregister(w)
			return l.holdAll(ctx, c, row, pollStart)
		case err == nil:
			if l.requeue(w, row.WaitingFor) && !repolled {
				// Moved on to another resource's local queue: a release of it before the move
				// woke nobody here, so poll again at once (once: a waiter sent back and forth
				// between two resources sleeps between its polls as any other).
				repolled = true
				continue
			}
		case ctx.Err() != nil:
			l.abandonAll(w, c)
			return nil, l.waitError(ctx, c.req, start, timeout, nil)
		case !retry.Transient(err):
			l.abandonAll(w, c)
			return nil, errs.Errorf("acquire %s: %w", c.req.label, err)
		}
		repolled = false
		handoff, woken, err := l.sleep(ctx, w, polling.Delay(polls))
		if err != nil {
			l.abandonAll(w, c)
			return nil, l.waitError(ctx, c.req, start, timeout, nil)
		}
		if woken || handoff != nil {
			polls = 0
		}
	}
}

// combined is a combined acquisition's arguments, checked.
type combined struct {
	req request // its holder, timing and metadata; name and label name every resource
	rs  []Resource
	// order is rs's indexes in canonical order; leaving, every row and queue place the holder
	// may have among them, in that order: what giving up releases.
	order   []int
	leaving []string
}

func (l *Locker) newCombined(rs []Resource, opts *AcquireOptions) (*combined, error) {
	if len(rs) == 0 || len(rs) > MaxResources {
		return nil, errs.Errorf("%w: a combined acquisition takes from 1 to %d resources, not %d", pglock.ErrInvalidArgument, MaxResources, len(rs))
	}
	c := &combined{rs: slices.Clone(rs)}
	ids := make([]string, len(rs))
	for i := range c.rs {
		r := &c.rs[i]
		switch {
		case (r.Lock == "") == (r.Semaphore == ""):
			return nil, errs.Errorf("%w: resource %d: set either Lock or Semaphore", pglock.ErrInvalidArgument, i)
		case r.Lock != "":
			if r.Places != (Places{}) {
				return nil, errs.Errorf("%w: resource %d: lock %q has Places", pglock.ErrInvalidArgument, i, r.Lock)
			}
			ids[i] = r.Lock
		default:
			if err := checkPlaces(r.Semaphore, &r.Places); err != nil {
				return nil, err
			}
			ids[i] = SemaphorePrefix + r.Semaphore
		}
	}
	c.order = make([]int, len(rs))
	for i := range c.order {
		c.order[i] = i
	}
	slices.SortFunc(c.order, func(a, b int) int { return strings.Compare(ids[a], ids[b]) })
	for k := 1; k < len(c.order); k++ {
		if ids[c.order[k]] == ids[c.order[k-1]] {
			return nil, errs.Errorf("%w: %q is listed twice", pglock.ErrInvalidArgument, ids[c.order[k]])
		}
	}
	// Checks the options (and the first resource's name), mints the holder id.
	first := c.rs[0].Lock
	if first == "" {
		first = c.rs[0].Semaphore
	}
	req, err := l.newRequest(first, opts)
	if err != nil {
		return nil, err
	}
	for i, r := range c.rs {
		if r.Lock != "" {
			if err := checkLockName(r.Lock); err != nil {
				return nil, errs.Errorf("resource %d: %w", i, err)
			}
		} else if err := checkPlaceName(r.Semaphore, req.holder); err != nil {
			return nil, err
		}
	}
	sorted := make([]string, len(ids))
	for k, i := range c.order {
		sorted[k] = ids[i]
		c.leaving = append(c.leaving, ids[i])
		if c.rs[i].Semaphore != "" {
			c.leaving = append(c.leaving, ids[i]+"/"+req.holder)
		}
	}
	req.label = strings.Join(sorted, "+")
	req.name = req.label
	c.req = req
	return c, nil
}

// takeAll is one attempt, a try or a poll. It takes the turn of this Locker's attempts on each
// of its semaphores first, in canonical order, as takePlaces takes one's.
func (l *Locker) takeAll(ctx context.Context, c *combined, wait bool) (db.TakeAllRow, error) {
	for _, i := range c.order {
		if name := c.rs[i].Semaphore; name != "" {
			leave, err := l.pollTurn(ctx, name)
			if err != nil {
				return db.TakeAllRow{}, err
			}
			defer leave()
		}
	}
	return l.queries.TakeAll(ctx, c.params(wait))
}

// params are the arguments of a try (wait false) or poll.
func (c *combined) params(wait bool) db.TakeAllParams {
	p := db.TakeAllParams{
		HolderID: c.req.holder, Names: make([]string, len(c.rs)), Places: make([]int32, len(c.rs)),
		Permits: make([]int32, len(c.rs)), Keys: make([]string, len(c.rs)), PerKeys: make([]int32, len(c.rs)),
		TtlMs: c.req.timing.TTL.Milliseconds(), Metadata: c.req.encoded, Instance: c.req.instance, Wait: wait,
	}
	for i, r := range c.rs {
		if r.Lock != "" {
			p.Names[i] = r.Lock
			continue
		}
		p.Names[i], p.Places[i], p.Permits[i] = r.Semaphore, int32(r.Places.Take), int32(r.Places.Permits)
		p.Keys[i], p.PerKeys[i] = r.Places.Key, int32(r.Places.PerKey)
	}
	return p
}

// holdAll makes the Locks a successful attempt took, whose lease counts from leaseStart, and
// starts keeping it; unless the Locker closed meanwhile: then it gives them back.
func (l *Locker) holdAll(ctx context.Context, c *combined, row db.TakeAllRow, leaseStart time.Time) (*Locks, error) {
	ls := &Locks{l: l, c: c, ctx: ctx, label: c.req.label, holder: c.req.holder, heldFrom: time.Now(), held: make([]Held, len(c.rs))}
	for i, r := range c.rs {
		ls.held[i] = Held{Resource: r, Name: row.LockNames[i], Token: row.FencingTokens[i]}
	}
	for _, i := range c.order {
		ls.rows = append(ls.rows, row.LockNames[i])
		ls.tokens = append(ls.tokens, row.FencingTokens[i])
	}
	ls.lease = lease.New(lease.Config{
		Name: ls.label, Timing: c.req.timing, Start: leaseStart, ExpiresAt: row.ExpiresAt,
		Ctx: l.ctx, Tracker: (*background)(l), Renew: ls.renew,
		OnLost: func(err error, cause pglock.Cause) {
			l.cfg.Logger.Error("pglock: locks lost", "locks", ls.label, "cause", cause, "error", err)
			l.mu.Lock()
			if _, held := l.combined[ls]; held && !l.closed { // (Close releases them itself)
				delete(l.combined, ls)
				l.leaveAll(c) // what is still held goes back at once, not at its lease's end
			}
			l.mu.Unlock()
			ls.observe(pglock.EventLost, func(e *pglock.Event) { e.Cause, e.Held, e.Err = cause, time.Since(ls.heldFrom), err })
		},
		OnRenewFailed: func(err error, failures int) {
			if errors.Is(err, errRowsBusy) && failures < 3 {
				return // a fenced transaction holds a row for a moment: tried again; told if it lasts
			}
			l.cfg.Logger.Warn("pglock: renewal failed; retrying", "locks", ls.label, "failures", failures, "error", err)
			ls.observe(pglock.EventRenewFailed, func(e *pglock.Event) { e.Err = err })
		},
	})
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ls.lease.Stop()
		releaseCtx, cancel := context.WithTimeout(l.ctx, c.req.timing.TTL) // Close's ctx bounds it
		defer cancel()
		_, err := l.queries.ReleaseAll(releaseCtx, db.ReleaseAllParams{LockNames: c.leaving, HolderID: c.req.holder})
		return nil, errors.Join(errs.Errorf("acquire %s: %w", c.req.label, pglock.ErrClosed), err)
	}
	l.combined[ls] = struct{}{}
	l.mu.Unlock()
	ls.lease.Start()
	return ls, nil
}

// errRowsBusy is a renewal that found a row held by another statement (a fenced transaction):
// it is tried again.
var errRowsBusy = errors.New("a row is held by another transaction")

// renew renews every row in one statement: held while all are.
func (ls *Locks) renew(ctx context.Context, ttl time.Duration) (time.Time, bool, error) {
	p := db.RenewLocksParams{LockNames: ls.rows, HolderIds: make([]string, len(ls.rows)), TtlMs: make([]int64, len(ls.rows))}
	for i := range ls.rows {
		p.HolderIds[i], p.TtlMs[i] = ls.holder, ttl.Milliseconds()
	}
	rows, err := ls.l.queries.RenewLocks(ctx, p)
	if err != nil {
		return time.Time{}, false, err
	}
	var ends time.Time
	for _, r := range rows {
		switch r.Outcome {
		case "gone":
			return time.Time{}, false, nil
		case "busy":
			return time.Time{}, false, errRowsBusy
		}
		if ends.IsZero() || r.ExpiresAt.Before(ends) {
			ends = r.ExpiresAt
		}
	}
	return ends, true, nil
}

// Held returns the resources held, in the order they were asked for, each with its row's name
// and fencing token.
func (ls *Locks) Held() []Held { return slices.Clone(ls.held) }

// ExpiresAt returns when the earliest of the leases ends unless renewed, by the database's clock.
func (ls *Locks) ExpiresAt() time.Time { return ls.lease.ExpiresAt() }

// Deadline is Lock.Deadline for the resources together.
func (ls *Locks) Deadline() time.Time { return ls.lease.Deadline() }

// Lost is closed once any of the resources is lost; the others are then given back. It is never
// closed for resources released normally.
func (ls *Locks) Lost() <-chan struct{} { return ls.lease.Lost() }

// Err returns nil while the resources are held or were released normally, and once they are lost
// an error matching [pglock.ErrLockLost] that says why.
func (ls *Locks) Err() error { return ls.lease.Err() }

// Release gives every resource back, in one round trip (a lock to its first waiter), as
// Lock.Release does one; its errors are Release's.
func (ls *Locks) Release(ctx context.Context) error {
	l := ls.l
	if !ls.lease.Stop() {
		if lost := ls.Err(); lost != nil {
			return lost
		}
		return errs.Errorf("%w: %s was already released", pglock.ErrNotHeld, ls.label)
	}
	l.forgetAll(ls)
	err := ls.releaseRows(ctx)
	if lost := ls.Err(); lost != nil {
		return lost
	}
	ls.observe(pglock.EventReleased, func(e *pglock.Event) { e.Held = time.Since(ls.heldFrom) })
	return err
}

// releaseRows gives every resource back in the database, in one round trip; if ctx ends first
// or the round trip fails on the way, again in the background.
func (ls *Locks) releaseRows(ctx context.Context) error {
	l := ls.l
	row, err := l.queries.ReleaseAll(ctx, db.ReleaseAllParams{LockNames: ls.rows, HolderID: ls.holder})
	switch {
	case err != nil && (ctx.Err() != nil || retry.Transient(err)) && l.leaveAllLater(ls.c):
		return errs.Errorf("release %s (trying again in the background): %w", ls.label, err)
	case err != nil:
		return errs.Errorf("release %s (held until the TTL runs out): %w", ls.label, err)
	case int(row.Released) < len(ls.rows):
		lost := errs.Errorf("%w: %w: %d of %s were no longer held at release", pglock.ErrLockLost, pglock.ErrNotHeld,
			len(ls.rows)-int(row.Released), ls.label)
		if ls.lease.LostBeforeStop(lost) {
			return lost
		}
		return nil // declared lost before, by Close: that loss is the one told
	}
	return nil
}

// Fence is Lock.Fence for every resource at once, in one statement: it verifies that each is
// still held with its token, and keeps them so until tx ends.
func (ls *Locks) Fence(ctx context.Context, tx pgx.Tx) error {
	q, err := db.InTx(tx)
	if err != nil {
		return err
	}
	if err := ls.Err(); err != nil {
		return err
	}
	n, err := db.New(q).FenceAll(ctx, db.FenceAllParams{LockNames: ls.rows, FencingTokens: ls.tokens,
		GraceMs: ls.lease.Timing().Margin.Milliseconds()})
	if err != nil {
		return errs.Errorf("verify fence of %s: %w", ls.label, err)
	}
	if int(n) < len(ls.rows) {
		err := errs.Errorf("%w: %d of %s are not held with their tokens", pglock.ErrLockLost, len(ls.rows)-int(n), ls.label)
		ls.lease.Lose(pglock.CauseForceReleased, err)
		ls.observe(pglock.EventFenceRefused, func(e *pglock.Event) { e.Err = err })
		return err
	}
	return nil
}

// requeue moves w to the local queue of name, the resource its combined acquisition waits for;
// false if it was there already.
func (l *Locker) requeue(w *waiter, name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.req.name == name {
		return false
	}
	l.dequeueLocked(w)
	w.req.name = name
	l.queues[name] = append(l.queues[name], w)
	return true
}

// abandonAll ends w's wait: leaving is counted in l.waits while w's own count holds.
func (l *Locker) abandonAll(w *waiter, c *combined) {
	l.leaveAll(c)
	l.unregister(w)
}

// leaveAll gives up, in the background, every row and queue place c's holder may have (see
// leave for when it may run).
func (l *Locker) leaveAll(c *combined) {
	l.inBackground(c.req.label, c.req.timing.TTL, func(ctx context.Context) error {
		_, err := l.queries.ReleaseAll(ctx, db.ReleaseAllParams{LockNames: c.leaving, HolderID: c.req.holder})
		return err
	})
}

// leaveAllLater is leaveAll counted under l.mu; false once the Locker is closed.
func (l *Locker) leaveAllLater(c *combined) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.leaveAll(c)
	return true
}

// forgetAll stops counting ls as held; false if it was not.
func (l *Locker) forgetAll(ls *Locks) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.combined[ls]
	delete(l.combined, ls)
	return ok
}

// observeAcquireAll reports the end of a combined acquisition begun at start: one acquisition of
// each resource when it succeeded (so that a semaphore's places are counted with its others),
// else one of the whole, named by its label.
func (l *Locker) observeAcquireAll(ctx context.Context, label string, blocking bool, start time.Time, ls **Locks, err *error) {
	e := pglock.Event{Kind: pglock.EventAcquire, Primitive: pglock.PrimitiveLock, Name: label, Blocking: blocking,
		Wait: time.Since(start), Outcome: observe.AcquireOutcome(*err), Err: *err}
	if *ls == nil {
		l.events.Emit(ctx, e)
		return
	}
	for i, h := range (*ls).held {
		each := e
		each.Primitive, each.Name, each.Token, each.Count = h.event()
		each.Blocking = blocking && i == 0 // one wait, told (and traced) once
		l.events.Emit(ctx, each)
	}
}

// event is what h's events say of it: its primitive, name, token and places.
func (h Held) event() (pglock.Primitive, string, int64, int64) {
	if h.Lock != "" {
		return pglock.PrimitiveLock, h.Lock, h.Token, 0
	}
	return pglock.PrimitiveSemaphore, h.Semaphore, h.Token, int64(h.Places.Take)
}

// observe reports an event about held Locks: a failed renewal or a refused fence once, named
// by the label (one statement failed); the others, which count what is held, once for each
// resource.
func (ls *Locks) observe(kind pglock.EventKind, f func(*pglock.Event)) {
	if ls.l.events == nil {
		return
	}
	if kind == pglock.EventRenewFailed || kind == pglock.EventFenceRefused {
		e := pglock.Event{Kind: kind, Primitive: pglock.PrimitiveLock, Name: ls.label}
		f(&e)
		ls.l.events.Emit(ls.ctx, e)
		return
	}
	for _, h := range ls.held {
		e := pglock.Event{Kind: kind}
		e.Primitive, e.Name, e.Token, e.Count = h.event()
		f(&e)
		ls.l.events.Emit(ls.ctx, e)
	}
}
