package tablelock

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/observe"
	"github.com/pglock/pglock/internal/retry"
)

// Locker acquires table locks for one process. It is safe for concurrent use.
type Locker struct {
	events   *observe.Emitter // nil without an Observer
	pool     *pgxpool.Pool
	queries  *db.Queries
	cfg      Config
	instance string

	// ctx lives until Close has released everything; the heartbeats of held locks run under it
	// and are counted in wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// renewals renews the held locks' leases together (pglock_renew_many); places keeps the
	// waiters' places in the queues (pglock_wait_many).
	renewals, places *lease.Set

	// waits counts Acquire calls waiting or cleaning up after a wait; Close waits for them.
	waits sync.WaitGroup

	closing   context.Context // done when Close begins: waiters stop waiting, polls are canceled
	stopWaits context.CancelFunc
	closeDone chan struct{} // closed when the first Close returns

	mu       sync.Mutex
	closed   bool
	held     map[*Lock]struct{}
	combined map[*Locks]struct{}  // held combined acquisitions
	queues   map[string][]*waiter // local waiters per lock name, in arrival order
	byHolder map[string]*waiter
	// polling holds, per semaphore, the turn of this Locker's attempts on it (see takePlaces).
	polling map[string]*pollTurn
	// unsubscribe ends the subscriptions to the pool's listener, made at the first wait.
	unsubscribe []func()
	tryConns    map[*pgxpool.Conn]struct{} // connections of tries under way: Close cuts them off
}

// New returns a Locker that takes its connections from pool. A nil cfg means the defaults.
func New(pool *pgxpool.Pool, cfg *Config) (*Locker, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	resolved := cfg.withDefaults()
	if err := resolved.validate(); err != nil {
		return nil, err
	}
	instance, err := ident.Instance(resolved.AppName)
	if err != nil {
		return nil, errs.Errorf("%w: Config.AppName %w", pglock.ErrInvalidArgument, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	closing, stopWaits := context.WithCancel(context.Background())
	l := &Locker{
		events:    observe.New(resolved.Observer, resolved.Logger),
		pool:      pool,
		queries:   db.New(db.Translating(pool)),
		cfg:       resolved,
		instance:  instance,
		ctx:       ctx,
		cancel:    cancel,
		closing:   closing,
		stopWaits: stopWaits,
		closeDone: make(chan struct{}),
		held:      map[*Lock]struct{}{},
		combined:  map[*Locks]struct{}{},
		queues:    map[string][]*waiter{},
		byHolder:  map[string]*waiter{},
		polling:   map[string]*pollTurn{},
		tryConns:  map[*pgxpool.Conn]struct{}{},
	}
	l.renewals = lease.NewSet(lease.SetConfig{Renew: l.renewMany, Ctx: ctx, Tracker: (*background)(l), OnLag: l.lagging})
	// A place is row-locked while a statement keeps it, and a release passes over a locked
	// place to the next waiter: statements of placesBatch keep that window to a few
	// milliseconds every third of the TTL.
	l.places = lease.NewSet(lease.SetConfig{Renew: l.keepPlaces, Ctx: ctx, Tracker: (*background)(l), Batch: placesBatch})
	return l, nil
}

// placesBatch is how many waiters' places one statement keeps.
const placesBatch = 500

// renewMany renews the leases of locks in one statement.
func (l *Locker) renewMany(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	p := db.RenewLocksParams{LockNames: make([]string, len(due)), HolderIds: make([]string, len(due)), TtlMs: make([]int64, len(due))}
	for i, d := range due {
		lk := d.Ref.(*Lock)
		p.LockNames[i], p.HolderIds[i], p.TtlMs[i] = lk.name, lk.holder, d.TTL.Milliseconds()
	}
	rows, err := l.queries.RenewLocks(ctx, p)
	return lease.Outcomes(rows, err, func(r db.RenewLocksRow) (string, time.Time) { return r.Outcome, r.ExpiresAt })
}

// TryAcquire takes the lock if it is free, in one round trip, or returns a *LockedError
// (matching [pglock.ErrLocked]) describing its holder.
func (l *Locker) TryAcquire(ctx context.Context, name string, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveLock, name, false, time.Now(), &lk, &err)
	}
	req, err := l.newRequest(name, opts)
	if err != nil {
		return nil, err
	}
	// The try gets a connection of its own, so that Close can cut it off (tryConns) without
	// this call deriving a cancelable context: pgx watches every cancelable context it is
	// given, which costs a failed try about a twentieth of its time.
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		if l.isClosed() {
			err = pglock.ErrClosed
		}
		return nil, errs.Errorf("acquire %q: %w", name, db.Translate(err))
	}
	if !l.startTry(conn) {
		conn.Release()
		return nil, errs.Errorf("acquire %q: %w", name, pglock.ErrClosed)
	}
	defer l.waits.Done()
	start := time.Now()
	row, err := db.New(db.Translating(conn)).TryAcquireLock(ctx, req.params())
	cutOff := l.endTry(conn)
	conn.Release()
	if err != nil {
		if cutOff || ctx.Err() != nil || retry.Transient(err) {
			// Cut short on the wire or lost with its connection, the try may still have taken
			// the lock on the server: give it back. (Waiting for the answer instead, as polls
			// do, costs a goroutine switch on every try; a release that overtakes the try
			// leaves the lock to its TTL.)
			l.leave(req.name, req.holder, req.timing.TTL, 0)
		}
		switch {
		case cutOff:
			err = pglock.ErrClosed
		case ctx.Err() != nil:
			err = context.Cause(ctx)
		}
		return nil, errs.Errorf("acquire %q: %w", name, err)
	}
	if !row.Acquired {
		return nil, lockedError(name, row.HolderID, row.Instance, row.Metadata, row.ExpiresAt)
	}
	return l.hold(ctx, req, row.FencingToken, row.ExpiresAt, start, 0, 0)
}

// Acquire waits until it holds the lock, ctx is done, opts.WaitTimeout has passed, or the
// Locker is closed. Waiters are served in the order they queued, across all processes.
func (l *Locker) Acquire(ctx context.Context, name string, opts *AcquireOptions) (lk *Lock, err error) {
	if l.events != nil {
		defer l.observeAcquire(ctx, pglock.PrimitiveLock, name, true, time.Now(), &lk, &err)
	}
	req, err := l.newRequest(name, opts)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if opts != nil {
		timeout = opts.WaitTimeout
	}
	return l.wait(ctx, req, timeout)
}

// WithLock acquires the lock as Acquire does, runs fn, and releases the lock. fn's context is
// canceled, with cause [pglock.ErrLockLost], if the lock is lost while fn runs; WithLock then
// returns an error matching [pglock.ErrLockLost] as well as any error of fn's.
func (l *Locker) WithLock(ctx context.Context, name string, opts *AcquireOptions, fn func(ctx context.Context) error) error {
	lk, err := l.Acquire(ctx, name, opts)
	if err != nil {
		return err
	}
	fnCtx, stop := lk.lease.Guard(ctx)
	defer stop()
	// Release even when ctx is done, or fn panics: a lock left to expire would block others
	// for a TTL, and one left to its heartbeat would be renewed until Close.
	release := func() error {
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lk.lease.Timing().TTL)
		defer cancel()
		return lk.Release(releaseCtx)
	}
	released := false
	defer func() {
		if !released {
			release()
		}
	}()

	fnErr := fn(fnCtx)
	released = true
	return errors.Join(fnErr, release())
}

// Stats reports how many locks the Locker holds and how many Acquire calls wait.
func (l *Locker) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Held: len(l.held) + len(l.combined), Waiting: len(l.byHolder), RenewalLag: l.renewals.Lag(), Saturated: l.renewals.Saturated()}
}

// lagging tells the log and the Observer that renewals are behind, or have caught up.
func (l *Locker) lagging(lag time.Duration, saturated bool) {
	held := l.renewals.Len()
	if !saturated {
		l.cfg.Logger.Info("pglock: renewals have caught up; acquisitions resume", "lag", lag, "held", held)
	} else {
		l.cfg.Logger.Warn("pglock: renewals are falling behind; new acquisitions fail with ErrSaturated until they catch up",
			"lag", lag, "held", held)
	}
	if l.events != nil {
		outcome := pglock.OutcomeError
		if !saturated {
			outcome = pglock.OutcomeAcquired
		}
		l.events.Emit(context.Background(), pglock.Event{Kind: pglock.EventRenewalLag, Primitive: pglock.PrimitiveLock,
			Outcome: outcome, Lag: lag, Count: int64(held)})
	}
}

// Close stops the TryAcquire and Acquire calls under way (they return [pglock.ErrClosed]) and
// releases every lock the Locker holds, declaring each lost first (Err matches
// [pglock.ErrLockLost] and [pglock.ErrClosed], and WithLock functions see their context canceled):
// a lock released by Close may be someone else's a moment later. Requests that were under way
// settle in the background (what they took is given back), and Close waits for them and its
// other goroutines as long as ctx allows: with the database unreachable, background releases
// retry until their TTL runs out, so bound ctx to shut down sooner. (A TryAcquire still waiting
// for a connection from the pool returns [pglock.ErrClosed] once it has one.) It returns the
// errors of the releases. A Close while another runs returns when that one does, or when its
// own ctx ends.
func (l *Locker) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		select {
		case <-l.closeDone:
		case <-ctx.Done():
		}
		return nil
	}
	defer close(l.closeDone)
	l.closed = true
	held := make([]*Lock, 0, len(l.held))
	for lk := range l.held {
		held = append(held, lk)
	}
	combined := make([]*Locks, 0, len(l.combined))
	for ls := range l.combined {
		combined = append(combined, ls)
	}
	for conn := range l.tryConns {
		// As pgx does on cancel: the try's read or write fails at once, and pgx closes the
		// connection, so the pool discards it. endTry clears the deadline of a try that
		// finished first.
		conn.Conn().PgConn().Conn().SetDeadline(time.Now())
	}
	l.mu.Unlock()
	l.stopWaits()

	var failures []error
	for _, lk := range held {
		lk.lease.Lose(pglock.CauseClosed, errs.Errorf("%w: %w: %q was released by Locker.Close", pglock.ErrLockLost, pglock.ErrClosed, lk.name))
		if lk.markReleased() {
			if err := lk.releaseRow(ctx, 0); err != nil {
				failures = append(failures, err)
			}
		}
	}
	for _, ls := range combined {
		ls.lease.Lose(pglock.CauseClosed, errs.Errorf("%w: %w: %s were released by Locker.Close", pglock.ErrLockLost, pglock.ErrClosed, ls.label))
		if ls.lease.Stop() && l.forgetAll(ls) {
			if err := ls.releaseRows(ctx); err != nil {
				failures = append(failures, err)
			}
		}
	}
	l.waitForBackground(ctx)
	l.mu.Lock()
	unsubscribe := l.unsubscribe
	l.mu.Unlock()
	for _, unsubscribe := range unsubscribe { // without l.mu: the listener's handlers take it
		unsubscribe()
	}
	return errors.Join(failures...)
}

// waitForBackground lets abandoned waits clean up until ctx is done, then stops everything.
func (l *Locker) waitForBackground(ctx context.Context) {
	waitsDone := make(chan struct{})
	go func() {
		l.waits.Wait()
		close(waitsDone)
	}()
	select {
	case <-waitsDone:
	case <-ctx.Done():
	}
	l.mu.Lock()
	l.cancel() // under mu: no heartbeat starts after this (startBackground)
	l.mu.Unlock()
	l.wg.Wait()
	<-waitsDone
}

// request is one acquisition's arguments, checked.
type request struct {
	name string
	// primitive and label are what events report: a lock and its name, or a semaphore and
	// its own name (not its place's).
	primitive pglock.Primitive
	label     string
	places    int // a semaphore's places it takes
	holder    string
	timing    lease.Timing
	metadata  map[string]any
	encoded   json.RawMessage
	instance  string
}

func (l *Locker) newRequest(name string, opts *AcquireOptions) (request, error) {
	if opts == nil {
		opts = &AcquireOptions{}
	}
	if err := checkLockName(name); err != nil {
		return request{}, err
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = l.cfg.TTL
	}
	t, err := l.cfg.timing(ttl)
	if err != nil {
		return request{}, err
	}
	if opts.WaitTimeout < 0 {
		return request{}, errs.Errorf("%w: negative WaitTimeout", pglock.ErrInvalidArgument)
	}
	encoded := json.RawMessage(`{}`)
	if opts.Metadata != nil {
		if encoded, err = json.Marshal(opts.Metadata); err != nil {
			return request{}, errs.Errorf("%w: metadata: %w", pglock.ErrInvalidArgument, err)
		}
		if ident.HoldsNUL(encoded) {
			return request{}, errs.Errorf("%w: metadata: PostgreSQL's jsonb cannot hold the NUL character", pglock.ErrInvalidArgument)
		}
	}
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return request{}, pglock.ErrClosed
	}
	if l.renewals.Saturated() {
		return request{}, errs.Errorf("acquire %q: %w (%s behind, %d leases held)", name, pglock.ErrSaturated,
			l.renewals.Lag().Round(time.Millisecond), l.renewals.Len())
	}
	return request{name: name, primitive: pglock.PrimitiveLock, label: name, holder: ident.NewHolderID(), timing: t, metadata: opts.Metadata, encoded: encoded, instance: l.instance}, nil
}

// checkLockName checks that name may be a table lock's.
func checkLockName(name string) error {
	if err := pglock.ValidateName(name); err != nil {
		return err
	}
	if strings.HasPrefix(name, SemaphorePrefix) {
		return errs.Errorf("%w: names starting %q are a semaphore's", pglock.ErrInvalidName, SemaphorePrefix)
	}
	return nil
}

// params are the arguments of a try; a poll's (db.PollLockParams) are the same.
func (r request) params() db.TryAcquireLockParams {
	return db.TryAcquireLockParams{
		LockName: r.name, HolderID: r.holder, TtlMs: r.timing.TTL.Milliseconds(),
		Metadata: r.encoded, Instance: r.instance,
	}
}

// hold makes a held Lock whose lease counts from leaseStart, the start of the request that
// last wrote it (or its place in the queue), and starts keeping it; unless the Locker closed
// meanwhile, in which case nobody would keep it: it is released and the caller told so.
func (l *Locker) hold(ctx context.Context, req request, token int64, expiresAt, leaseStart time.Time, waited, vacancy time.Duration) (*Lock, error) {
	lk := newLock(ctx, l, req, token, expiresAt, leaseStart)
	lk.vacancy = vacancy
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		lk.unreported = true // never the caller's: its acquisition is told as canceled, nothing more
		lk.markReleased()
		releaseCtx, cancel := context.WithTimeout(l.ctx, req.timing.TTL) // Close's ctx bounds it
		defer cancel()
		return nil, errors.Join(errs.Errorf("acquire %q: %w", req.name, pglock.ErrClosed), lk.releaseRow(releaseCtx, 0))
	}
	l.held[lk] = struct{}{}
	l.mu.Unlock()
	lk.lease.Start()
	l.cfg.Logger.Debug("pglock: acquired", "lock", req.name, "token", token, "waited", waited)
	return lk, nil
}

// background counts in l.wg what a held lock's timers start, so that Close waits for it.
type background Locker

// Begin counts the work; false once Close has stopped everything.
func (b *background) Begin() bool {
	l := (*Locker)(b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return false
	}
	l.wg.Add(1)
	return true
}

func (b *background) End() { b.wg.Done() }

func (l *Locker) forget(lk *Lock) {
	l.mu.Lock()
	delete(l.held, lk)
	l.mu.Unlock()
}

// observeAcquire reports the end of an acquisition begun at start, with what it returned.
func (l *Locker) observeAcquire(ctx context.Context, p pglock.Primitive, name string, blocking bool, start time.Time, lk **Lock, err *error) {
	e := pglock.Event{Kind: pglock.EventAcquire, Primitive: p, Name: name, Blocking: blocking,
		Wait: time.Since(start), Outcome: observe.AcquireOutcome(*err), Err: *err}
	if *lk != nil {
		e.Token, e.Count = (*lk).token, int64((*lk).places)
	}
	l.events.Emit(ctx, e)
}

// observe reports an event about a held lock.
func (lk *Lock) observe(kind pglock.EventKind, f func(*pglock.Event)) {
	if lk.l.events == nil || lk.unreported {
		return
	}
	e := pglock.Event{Kind: kind, Primitive: lk.primitive, Name: lk.label, Token: lk.token, Count: int64(lk.places)}
	if f != nil {
		f(&e)
	}
	lk.l.events.Emit(lk.ctx, e)
}

func lockedError(name, holder, instance string, metadata json.RawMessage, expiresAt time.Time) *LockedError {
	e := &LockedError{Name: name, Holder: holder, Instance: instance, ExpiresAt: expiresAt}
	_ = json.Unmarshal(metadata, &e.Metadata) // the database only stores JSON objects
	return e
}

// AsLocker returns l as a [pglock.Locker] whose every acquisition uses opts, for code that takes
// locks through that interface (and is tested with package memlock).
func (l *Locker) AsLocker(opts *AcquireOptions) pglock.Locker { return boundLocker{l, opts} }

type boundLocker struct {
	l    *Locker
	opts *AcquireOptions
}

func (g boundLocker) TryAcquire(ctx context.Context, name string) (pglock.Lock, error) {
	return asLock(g.l.TryAcquire(ctx, name, g.opts))
}

func (g boundLocker) Acquire(ctx context.Context, name string) (pglock.Lock, error) {
	return asLock(g.l.Acquire(ctx, name, g.opts))
}

func (g boundLocker) WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	return g.l.WithLock(ctx, name, g.opts, fn)
}

// asLock keeps a nil *Lock from becoming a non-nil [pglock.Lock].
func asLock(lk *Lock, err error) (pglock.Lock, error) {
	if err != nil {
		return nil, err
	}
	return lk, nil
}
