// Package lease keeps a lease held in a database row: it renews the lease in the background,
// takes turns with explicit renewals, and declares the lease lost, before the database could
// give it to anyone else, when renewals stop getting through or one finds it gone. Every pglock
// package that leases a row (a table lock, a claimed job, a running cron tick, a leader's term)
// keeps it with a Keeper, parameterised by the statement that renews its row.
package lease

import (
	"context"
	"sync"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/errs"
)

// Timing is how a lease is kept.
type Timing struct {
	TTL       time.Duration // the lease, as the database counts it
	Heartbeat time.Duration // how often it is renewed; 0: never (only by Renew)
	Margin    time.Duration // how long before the database could give it away it is declared lost
}

// The TTLs a lease may have; the SQL contract refuses others.
const (
	MinTTL = 100 * time.Millisecond
	MaxTTL = 24 * time.Hour
)

// NewTiming is how a lease of ttl is kept: with margin (default a tenth of the TTL), and
// renewed every heartbeat where that fits the TTL before the margin, else every third of the
// TTL; a negative heartbeat means never (0 in Timing). The TTL is kept in whole milliseconds. A
// TTL outside [MinTTL, MaxTTL], or one that leaves no room for a heartbeat (a third of it)
// before the margin, gets an error matching pglock.ErrInvalidTTL: a lease that would be lost
// soon after it is taken; a negative margin, or a heartbeat under a millisecond, one matching
// pglock.ErrInvalidArgument.
func NewTiming(ttl, heartbeat, margin time.Duration) (Timing, error) {
	if ttl < MinTTL || ttl > MaxTTL {
		return Timing{}, errs.Errorf("%w: %s is outside [%s, %s]", pglock.ErrInvalidTTL, ttl, MinTTL, MaxTTL)
	}
	if margin < 0 {
		return Timing{}, errs.Errorf("%w: a negative safety margin (%s) would declare the lease lost after the store could give it away", pglock.ErrInvalidArgument, margin)
	}
	if heartbeat > 0 && heartbeat < time.Millisecond {
		return Timing{}, errs.Errorf("%w: a heartbeat of %s would renew the lease back to back", pglock.ErrInvalidArgument, heartbeat)
	}
	t := Timing{TTL: ttl.Truncate(time.Millisecond), Heartbeat: heartbeat, Margin: margin}
	if t.Margin == 0 {
		t.Margin = t.TTL / 10
	}
	switch {
	case t.Heartbeat < 0:
		t.Heartbeat = 0
	case t.Heartbeat == 0 || t.Heartbeat >= t.TTL-t.Margin:
		t.Heartbeat = t.TTL / 3
	}
	if t.Margin >= t.TTL-t.TTL/3 {
		return Timing{}, errs.Errorf("%w: a TTL of %s leaves no room for a heartbeat (a third of it) before the safety margin (%s)",
			pglock.ErrInvalidTTL, t.TTL, t.Margin)
	}
	return t, nil
}

// Valid reports nil for a Timing NewTiming could have made: a TTL in [MinTTL, MaxTTL], whole
// milliseconds, a margin that leaves a third of it, a heartbeat of 0 (never) or 1 ms to under
// the TTL less the margin; an error matching pglock.ErrInvalidTTL or pglock.ErrInvalidArgument
// otherwise.
func (t Timing) Valid() error {
	switch {
	case t.TTL < MinTTL || t.TTL > MaxTTL || t.TTL%time.Millisecond != 0:
		return errs.Errorf("%w: a TTL of %s is outside [%s, %s] or not in whole milliseconds", pglock.ErrInvalidTTL, t.TTL, MinTTL, MaxTTL)
	case t.Margin <= 0 || t.Margin >= t.TTL-t.TTL/3:
		return errs.Errorf("%w: a safety margin of %s in a TTL of %s", pglock.ErrInvalidTTL, t.Margin, t.TTL)
	case t.Heartbeat < 0 || (t.Heartbeat > 0 && t.Heartbeat < time.Millisecond) || t.Heartbeat >= t.TTL-t.Margin:
		return errs.Errorf("%w: a heartbeat of %s in a TTL of %s with a margin of %s", pglock.ErrInvalidArgument, t.Heartbeat, t.TTL, t.Margin)
	}
	return nil
}

// RenewFunc renews the lease for ttl from now, in one statement: the new expiry by the
// database's clock, or held false once the row is no longer this holder's.
type RenewFunc func(ctx context.Context, ttl time.Duration) (expiresAt time.Time, held bool, err error)

// Tracker counts the keeper's background work in its owner, so that the owner can wait for it
// when it shuts down: Begin reports false once the owner has stopped, and nothing starts then.
type Tracker interface {
	Begin() bool
	End()
}

// Group is a Tracker for an owner that stops by waiting: Wait refuses new work and waits for
// what began.
type Group struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	stopped bool
}

func (g *Group) Begin() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *Group) End() { g.wg.Done() }

// Wait refuses new work and waits for the work under way to end.
func (g *Group) Wait() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	g.wg.Wait()
}

// Config describes one lease. Name, Timing, Start, Ctx, and Set with Ref or else Renew, are
// required.
type Config struct {
	Name string // what is leased, as errors name it (quoted)
	// Set renews the lease's heartbeats together with its other leases, and its explicit
	// renewals alone, with the Set's statement; Ref is what that statement names the row by.
	Set *Set
	Ref any
	// Renew, without a Set, renews the row on every heartbeat and explicit renewal.
	Renew     RenewFunc
	Timing    Timing
	Start     time.Time       // start of the request that wrote the lease, on Clock
	ExpiresAt time.Time       // the lease's end by the database's clock, as that request returned it
	Ctx       context.Context // renewals run under it: it ends with the owner
	Clock     clock.Clock     // default: clock.Real
	Tracker   Tracker         // default: none

	OnLost        func(err error, cause pglock.Cause) // called once, when the lease is declared lost
	OnRenewFailed func(err error, failures int)       // a heartbeat failed and will be retried
}

// Keeper keeps one lease. Its methods are safe for concurrent use.
type Keeper struct {
	cfg   Config
	clock clock.Clock

	lostCtx  context.Context // done once the lease is lost; its cause says why
	markLost context.CancelCauseFunc

	// keepingCtx is the heartbeat's: canceled at Stop and at loss, so that a heartbeat held up
	// on the server ends at the deadline.
	keepingCtx  context.Context
	stopKeeping context.CancelFunc

	// One renewal at a time, so that the lease always follows the latest: a token, not a
	// mutex, so that a renewal waiting behind one the server holds up still ends with its ctx.
	renewing chan struct{}

	mu        sync.Mutex
	timing    Timing
	expiresAt time.Time // by the database's clock
	deadline  time.Time // on Clock: the lease is lost from then on
	stopped   bool
	started   bool
	// Timers, not a goroutine, keep the lease: a goroutine per lease, started at every
	// acquisition and woken at every release, costs a short lease a large part of its time.
	renewal  clock.Timer // the next heartbeat, without a Set; nil without heartbeats
	due      time.Time   // the next heartbeat, with a Set; zero while none is due or one is under way
	behind   time.Time   // with a Set: when the heartbeat not yet through was due; zero if none
	loss     clock.Timer // fires at the deadline
	failures int         // renewals failed in a row: heartbeats back off while it is not 0
}

// New returns a Keeper for a lease just written. It keeps nothing until Start.
func New(cfg Config) *Keeper {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	k := &Keeper{
		cfg: cfg, clock: cfg.Clock, timing: cfg.Timing, expiresAt: cfg.ExpiresAt,
		deadline: cfg.Start.Add(cfg.Timing.TTL - cfg.Timing.Margin), renewing: make(chan struct{}, 1),
	}
	k.lostCtx, k.markLost = context.WithCancelCause(context.Background())
	k.keepingCtx, k.stopKeeping = context.WithCancel(cfg.Ctx)
	return k
}

// Start starts the timers that keep the lease: a heartbeat that renews it (and never later than
// halfway to its deadline, which a lease written long ago can be close to), retrying failures,
// and the loss of the lease at its deadline. Keeping ends at Stop or loss, or when Ctx ends.
func (k *Keeper) Start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped || k.lostCtx.Err() != nil || k.started {
		return // stopped or lost before it started
	}
	k.started = true
	k.loss = k.clock.AfterFunc(k.until(k.deadline), k.deadlinePassed)
	k.scheduleRenewal(k.nextRenewal())
}

// renewOnce sends one renewal of the lease for ttl.
func (k *Keeper) renewOnce(ctx context.Context, ttl time.Duration) (time.Time, bool, error) {
	if k.cfg.Set != nil {
		return k.cfg.Set.renewOne(ctx, k.cfg.Ref, ttl)
	}
	return k.cfg.Renew(ctx, ttl)
}

// Lost is closed once the lease is lost. It is never closed for a lease stopped normally.
func (k *Keeper) Lost() <-chan struct{} { return k.lostCtx.Done() }

// Err returns nil until the lease is lost, then an error matching pglock.ErrLockLost that
// says why.
func (k *Keeper) Err() error {
	if k.lostCtx.Err() == nil {
		return nil
	}
	return context.Cause(k.lostCtx)
}

// Guard returns a context derived from ctx that is canceled, with the loss as its cause, when
// the lease is lost: the context of a function running under the lease. Call stop when the
// function returns.
func (k *Keeper) Guard(ctx context.Context) (guarded context.Context, stop func()) {
	guarded, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(k.lostCtx, func() { cancel(k.Err()) })
	return guarded, func() { unhook(); cancel(nil) }
}

// Timing returns how the lease is kept now.
func (k *Keeper) Timing() Timing {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.timing
}

// ExpiresAt returns when the lease ends unless renewed, by the database's clock, as of the last
// successful write.
func (k *Keeper) ExpiresAt() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.expiresAt
}

// Deadline returns when, on Clock, the lease will be declared lost unless renewed.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Stop ends the keeping, for a lease its holder gives up; false if it was stopped already. A
// renewal of its own in flight is canceled; one in a Set's statement goes on with the others,
// and whatever it finds changes nothing: a stopped lease is never declared lost by the keeper
// (LostBeforeStop reports a loss its release found).
func (k *Keeper) Stop() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	k.stopped = true
	k.stopTimers()
	k.stopKeeping()
	return true
}

// Lose declares the lease lost with err (which should match pglock.ErrLockLost) for cause, once,
// unless it was stopped: when the owner learns of the loss some other way (a fence check, a
// shutdown).
func (k *Keeper) Lose(cause pglock.Cause, err error) {
	k.mu.Lock()
	lost := k.loseLocked(cause, err)
	k.mu.Unlock()
	if lost != nil {
		k.lost(lost, cause)
	}
}

// loseLocked declares the lease lost with err for cause, unless it was stopped or lost already,
// and returns the loss to tell OnLost of (nil if none). Called with mu held.
func (k *Keeper) loseLocked(cause pglock.Cause, err error) error {
	if k.stopped || k.lostCtx.Err() != nil {
		return nil
	}
	lost := &lossError{cause, err}
	k.markLost(lost)
	k.stopTimers()
	k.stopKeeping() // a heartbeat under way can no longer save the lease
	return lost
}

// LostBeforeStop declares a stopped lease lost, its release having found it gone; false if it
// had been declared lost already (by the owner's shutdown, say), which then stands.
func (k *Keeper) LostBeforeStop(err error) bool {
	k.mu.Lock()
	if k.lostCtx.Err() != nil {
		k.mu.Unlock()
		return false
	}
	lost := &lossError{pglock.CauseForceReleased, err}
	k.markLost(lost)
	k.mu.Unlock()
	k.lost(lost, pglock.CauseForceReleased)
	return true
}

// lossError is a lost lease's error: err, and why, for pglock.CauseOf.
type lossError struct {
	cause pglock.Cause
	err   error
}

func (e *lossError) Error() string           { return e.err.Error() }
func (e *lossError) Unwrap() error           { return e.err }
func (e *lossError) LossCause() pglock.Cause { return e.cause }

func (k *Keeper) lost(err error, cause pglock.Cause) {
	if k.cfg.OnLost != nil {
		k.cfg.OnLost(err, cause)
	}
}

// Renew renews the lease from now, with t's timing (the current one when t is nil), and keeps
// it so from then on. A renewal under way finishes first; ctx bounds that wait too. The new
// deadline counts from the start of the request: the database set the expiry no earlier than
// that, plus the TTL. The deadline moves in before the request is sent when the new lease is
// shorter: a request that fails here may still have committed there.
func (k *Keeper) Renew(ctx context.Context, t *Timing) error {
	if lost := k.Err(); lost != nil {
		return lost // at once, not after a renewal under way
	}
	if err := k.takeTurn(ctx); err != nil {
		return err
	}
	defer func() { <-k.renewing }()
	start := k.clock.Now()
	timing, err := k.prepare(start, t)
	if err != nil {
		return err
	}
	expiresAt, held, err := k.renewOnce(ctx, timing.TTL)
	err = k.settle(start, timing, expiresAt, held, err)
	if k.cfg.Set != nil {
		k.mu.Lock()
		if k.due.IsZero() && !k.stopped && k.lostCtx.Err() == nil && k.started {
			k.scheduleRenewal(k.nextRenewal()) // a tick passed over the lease meanwhile
		}
		k.mu.Unlock()
	}
	return err
}

// prepare readies a renewal with t (the current timing when nil) that starts at start: the
// deadline moves in first when the new lease is shorter, since a request that fails here may
// still have committed there.
func (k *Keeper) prepare(start time.Time, t *Timing) (Timing, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		if lost := k.Err(); lost != nil { // stopped by its owner's shutdown, which declared it lost
			return Timing{}, lost
		}
		return Timing{}, errs.Errorf("%w: %q was released", pglock.ErrNotHeld, k.cfg.Name)
	}
	if lost := k.Err(); lost != nil {
		return Timing{}, lost
	}
	if t == nil {
		return k.timing, nil
	}
	if shorter := start.Add(t.TTL - t.Margin); shorter.Before(k.deadline) {
		k.deadline = shorter
		k.signalChange()
	}
	return *t, nil
}

// settle takes in the outcome of a renewal with timing t that started at start.
func (k *Keeper) settle(start time.Time, t Timing, expiresAt time.Time, held bool, err error) error {
	switch {
	case err == nil && held:
		k.mu.Lock()
		lost := k.lostCtx.Err() != nil // at its deadline, while the request was on its way
		if !lost {
			k.timing, k.expiresAt, k.deadline = t, expiresAt, start.Add(t.TTL-t.Margin)
			k.failures, k.behind = 0, time.Time{}
			k.signalChange()
		}
		k.mu.Unlock()
		if lost {
			return k.Err()
		}
		return nil
	case err == nil:
		k.Lose(pglock.CauseForceReleased, errs.Errorf("%w: %q is no longer held by this holder (force-released, or expired and taken)", pglock.ErrLockLost, k.cfg.Name))
		if lost := k.Err(); lost != nil {
			return lost
		}
		return errs.Errorf("%w: %q was released", pglock.ErrNotHeld, k.cfg.Name)
	}
	return errs.Errorf("renew %q: %w", k.cfg.Name, err)
}

// takeTurn waits for the renewal under way, if any, to end, unless ctx ends first.
func (k *Keeper) takeTurn(ctx context.Context) error {
	if ctx.Err() != nil {
		return errs.Errorf("renew %q: %w", k.cfg.Name, contextError(ctx))
	}
	select {
	case k.renewing <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errs.Errorf("renew %q: waiting for the renewal under way: %w", k.cfg.Name, contextError(ctx))
	}
}

// contextError is why ctx ended: its error, and its cause when that is another.
func contextError(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return errs.Errorf("%w: %w", ctx.Err(), cause)
	}
	return ctx.Err()
}

// signalChange moves the timers to the deadline and timing as they now are. Called with mu
// held. While renewals are failing, the retry already scheduled stands.
func (k *Keeper) signalChange() {
	if k.stopped || k.lostCtx.Err() != nil || !k.started {
		return // no longer kept, or not yet (Start sets the timers from the state it finds)
	}
	k.loss.Reset(k.until(k.deadline))
	if k.failures == 0 {
		k.scheduleRenewal(k.nextRenewal())
	}
}

// scheduleRenewal sets the next heartbeat d from now. Called with mu held.
func (k *Keeper) scheduleRenewal(d time.Duration) {
	switch {
	case k.cfg.Set != nil && k.timing.Heartbeat == 0:
		k.due = time.Time{}
	case k.cfg.Set != nil:
		k.due = k.clock.Now().Add(d)
		k.cfg.Set.add(k, k.due)
	case k.timing.Heartbeat == 0:
		if k.renewal != nil {
			k.renewal.Stop()
		}
	case k.renewal == nil:
		k.renewal = k.clock.AfterFunc(d, k.heartbeat)
	default:
		k.renewal.Reset(d)
	}
}

// stopTimers ends the keeping. Called with mu held.
func (k *Keeper) stopTimers() {
	if k.loss != nil {
		k.loss.Stop()
	}
	if k.renewal != nil {
		k.renewal.Stop()
	}
	if k.cfg.Set != nil {
		k.cfg.Set.remove(k)
	}
}

// nextRenewal is a heartbeat from now, or half the time left before the deadline if that is
// sooner. Called with mu held.
func (k *Keeper) nextRenewal() time.Duration {
	return max(0, min(k.timing.Heartbeat, k.until(k.deadline)/2))
}

func (k *Keeper) until(t time.Time) time.Duration { return t.Sub(k.clock.Now()) }

// deadlinePassed declares the lease lost, unless a renewal moved the deadline meanwhile (and
// reset the timer).
func (k *Keeper) deadlinePassed() {
	if !k.begin() {
		return // the owner has stopped
	}
	defer k.end()
	k.expire()
}

// expire declares the lease lost if its deadline has passed, and reports whether it had. The
// deadline is read and the loss declared under one lock: a renewal that settles meanwhile
// either moved the deadline first or finds the lease lost.
func (k *Keeper) expire() bool {
	k.mu.Lock()
	if k.clock.Now().Before(k.deadline) {
		k.mu.Unlock()
		return false
	}
	t, cause := k.timing, pglock.CauseRenewalFailed
	if t.Heartbeat <= 0 {
		cause = pglock.CauseExpired // nothing tried to renew it
	}
	lost := k.loseLocked(cause, errs.Errorf("%w: no renewal of %q succeeded within its TTL (%s) less the safety margin (%s)",
		pglock.ErrLockLost, k.cfg.Name, t.TTL, t.Margin))
	k.mu.Unlock()
	if lost != nil {
		k.lost(lost, cause)
	}
	return true
}

// heartbeat renews the lease, without a Set: a success schedules the next heartbeat (Renew
// moves the timers), a failure a retry (failed).
func (k *Keeper) heartbeat() {
	if !k.begin() {
		return
	}
	defer k.end()
	k.mu.Lock()
	t := k.timing
	k.mu.Unlock()
	if err := k.Renew(k.keepingCtx, nil); err != nil {
		k.retry(t, err)
	}
}

// takeDue takes the turn of a heartbeat due by now, or by now plus a tenth of it: a Set's
// tick renews it (settleHeartbeat ends the turn). It says since when a heartbeat of the lease
// has been due without getting through, and its heartbeat. False for a lease not due, not kept,
// or whose turn an explicit renewal has.
func (k *Keeper) takeDue(now time.Time) (since time.Time, heartbeat time.Duration, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.started || k.stopped || k.lostCtx.Err() != nil || k.due.IsZero() {
		return time.Time{}, 0, false
	}
	early := k.timing.Heartbeat / 10
	if k.failures > 0 {
		early = 0 // a retry waits for its backoff
	}
	if k.due.After(now.Add(early)) {
		return time.Time{}, 0, false
	}
	select {
	case k.renewing <- struct{}{}:
	default:
		// An explicit renewal is under way: it schedules the next heartbeat as it ends
		// (Renew), and until then the lease is not due, so that no tick spins on it.
		k.due = time.Time{}
		return time.Time{}, 0, false
	}
	if k.behind.IsZero() {
		k.behind = k.due
	}
	k.due = time.Time{}
	return k.behind, k.timing.Heartbeat, true
}

// dueAt is when the lease's next heartbeat is due; false if none is.
func (k *Keeper) dueAt() (time.Time, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.due, !k.due.IsZero() && !k.stopped && k.lostCtx.Err() == nil
}

// settleHeartbeat takes in the outcome of a Set's renewal of the lease (whose turn takeDue
// took), as heartbeat does its own. A lease whose row was busy is tried again as a failed one
// is, quietly, and counts as on time: a fence holds it up, not the Set.
func (k *Keeper) settleHeartbeat(start time.Time, t Timing, r Renewed, err error) {
	if err == nil && r.Busy {
		k.mu.Lock()
		k.behind = time.Time{}
		k.mu.Unlock()
		<-k.renewing
		k.retry(t, nil)
		return
	}
	err = k.settle(start, t, r.ExpiresAt, r.Held, err)
	<-k.renewing
	if err != nil {
		k.retry(t, err)
	}
}

// retry schedules a retry of a heartbeat that did not get through, with backoff and never later
// than halfway to the deadline, so that retries go on until it; unless the lease is no longer
// kept. A failure (err) is told to OnRenewFailed. A heartbeat that fails at or after the
// deadline (a Set's statement is bounded by it) is not retried but declares the loss itself:
// the loss timer may not have run yet on a busy machine, and a retry past the deadline fails at
// once, again and again, telling failures of a lease already lost.
func (k *Keeper) retry(t Timing, err error) {
	if k.keepingCtx.Err() != nil || k.Err() != nil || k.expire() {
		return // stopped, lost at the deadline, or the owner stopped
	}
	k.mu.Lock()
	k.failures++
	failures := k.failures
	if !k.stopped && k.lostCtx.Err() == nil {
		k.scheduleRenewal(min(RetryBackoff(t.Heartbeat).Delay(failures), k.nextRenewal()))
	}
	k.mu.Unlock()
	if err != nil && k.cfg.OnRenewFailed != nil {
		k.cfg.OnRenewFailed(err, failures)
	}
}

// RetryBackoff is how renewals (and releases) are retried: from 10 ms, doubling, up to the
// heartbeat interval, or 1 s without one.
func RetryBackoff(heartbeat time.Duration) backoff.Capped {
	if heartbeat <= 0 {
		heartbeat = time.Second
	}
	return backoff.Capped{First: 10 * time.Millisecond, Max: heartbeat}
}

func (k *Keeper) begin() bool {
	return k.cfg.Tracker == nil || k.cfg.Tracker.Begin()
}

func (k *Keeper) end() {
	if k.cfg.Tracker != nil {
		k.cfg.Tracker.End()
	}
}
