package lease

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/errs"
)

// A Set renews the leases of one owner together (a Locker's locks, a Deduper's attempts, a
// Scheduler's runs): one statement per heartbeat tick for every lease due, whatever their
// number, so that the database's statement rate no longer caps how many leases a process can
// hold. Each lease keeps its own timing, deadline and loss: a Set only decides when its
// renewal is sent, and with which others.
//
// A tick renews every lease due before the next tick could come: a lease whose heartbeat falls
// within a tenth of it (its Early) goes with the leases due now. Leases that go together are
// due together from then on, so a Set with many leases settles to at most one tick per Early
// (in chunks of MaxBatch), however they were acquired. A failed statement fails every lease
// in it, each retried as its own heartbeat would be and lost at its own deadline.
type Set struct {
	renew   RenewManyFunc
	clock   clock.Clock
	ctx     context.Context
	tracker Tracker

	mu      sync.Mutex
	members map[*Keeper]struct{}
	timer   clock.Timer
	wakeAt  time.Time // when timer fires; zero while it is not armed
	ticking bool      // a tick is under way: it arms the timer when it ends
	pending time.Time // the earliest wake asked for while ticking
	lag     time.Duration
	renewed int // statements sent, for tests and Stats
}

// MaxBatch is how many leases one statement renews at most: a tick with more sends several,
// MaxInFlight at a time, so that no statement holds its rows, or a connection, for long.
const (
	MaxBatch    = 5000
	MaxInFlight = 2
)

// Due is a lease to renew, as a RenewManyFunc gets it: the owner's reference to its row (the
// Ref of its Config) and the TTL to renew it for.
type Due struct {
	Ref any
	TTL time.Duration
}

// Renewed is a renewal's outcome: the lease's new expiry by the database's clock, or Held false
// when its row is no longer the holder's.
type Renewed struct {
	ExpiresAt time.Time
	Held      bool
}

// RenewManyFunc renews every lease in due in one statement, and answers an outcome for each,
// in the same order.
type RenewManyFunc func(ctx context.Context, due []Due) ([]Renewed, error)

// NewSet returns a Set whose ticks run under ctx (it ends with the owner), counted in tracker
// when there is one.
func NewSet(ctx context.Context, renew RenewManyFunc, clk clock.Clock, tracker Tracker) *Set {
	if clk == nil {
		clk = clock.Real
	}
	return &Set{renew: renew, clock: clk, ctx: ctx, tracker: tracker, members: map[*Keeper]struct{}{}}
}

// Lag is how late the last tick found the most overdue lease it renewed (0 when none was
// late): how far renewals are behind. It grows before any lease is lost, when the database or
// the pool cannot keep up.
func (s *Set) Lag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lag
}

// Statements is how many renewal statements the Set has sent.
func (s *Set) Statements() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// Len is how many leases the Set keeps.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members)
}

// renewOne renews one lease in a statement of its own (an explicit Renew).
func (s *Set) renewOne(ctx context.Context, ref any, ttl time.Duration) (time.Time, bool, error) {
	out, err := s.send(ctx, []Due{{ref, ttl}})
	if err != nil {
		return time.Time{}, false, err
	}
	return out[0].ExpiresAt, out[0].Held, nil
}

func (s *Set) send(ctx context.Context, due []Due) ([]Renewed, error) {
	s.mu.Lock()
	s.renewed++
	s.mu.Unlock()
	out, err := s.renew(ctx, due)
	if err == nil && len(out) != len(due) {
		err = errs.Errorf("renewal answered %d outcomes for %d leases", len(out), len(due))
	}
	return out, err
}

// add keeps k, due at at. A Keeper calls it with its own mutex held: a Set never takes a
// Keeper's mutex while it holds its own.
func (s *Set) add(k *Keeper, at time.Time) {
	s.mu.Lock()
	s.members[k] = struct{}{}
	s.mu.Unlock()
	s.wake(at)
}

func (s *Set) remove(k *Keeper) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, k)
	if len(s.members) == 0 && s.timer != nil && !s.ticking {
		s.timer.Stop() // nothing left to renew: no tick fires after its owner is done
		s.wakeAt = time.Time{}
	}
}

// wake has a tick run at at, unless one runs sooner.
func (s *Set) wake(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armLocked(at)
}

func (s *Set) armLocked(at time.Time) {
	if s.ticking {
		if s.pending.IsZero() || at.Before(s.pending) {
			s.pending = at // the tick under way arms the timer for it as it ends
		}
		return
	}
	if !s.wakeAt.IsZero() && !at.Before(s.wakeAt) {
		return // a tick comes sooner
	}
	s.wakeAt = at
	d := max(0, at.Sub(s.clock.Now()))
	if s.timer == nil {
		s.timer = s.clock.AfterFunc(d, s.tick)
	} else {
		s.timer.Reset(d)
	}
}

// tick renews every lease due, then arms the timer for the next one due.
func (s *Set) tick() {
	if s.tracker != nil {
		if !s.tracker.Begin() {
			return // the owner has stopped
		}
		defer s.tracker.End()
	}
	s.mu.Lock()
	if s.ticking {
		s.mu.Unlock()
		return
	}
	s.ticking, s.wakeAt = true, time.Time{}
	members := make([]*Keeper, 0, len(s.members))
	for k := range s.members {
		members = append(members, k)
	}
	s.mu.Unlock()

	now := s.clock.Now()
	var due []*Keeper
	var lag time.Duration
	for _, k := range members {
		if late, ok := k.takeDue(now); ok {
			due = append(due, k)
			lag = max(lag, late)
		}
	}
	s.mu.Lock()
	s.lag = lag
	s.mu.Unlock()
	s.renewAll(due)

	// The leases renewed, and those added meanwhile, asked for their next tick (pending); the
	// others are due as they were.
	next := time.Time{}
	for _, k := range members {
		if at, ok := k.dueAt(); ok && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	s.mu.Lock()
	s.ticking = false
	if !s.pending.IsZero() && (next.IsZero() || s.pending.Before(next)) {
		next = s.pending
	}
	s.pending = time.Time{}
	if !next.IsZero() {
		s.armLocked(next)
	}
	s.mu.Unlock()
}

// renewAll renews due in chunks of MaxBatch, MaxInFlight at a time.
func (s *Set) renewAll(due []*Keeper) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, MaxInFlight)
	for chunk := range slices.Chunk(due, MaxBatch) {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			s.renewChunk(chunk)
		})
	}
	wg.Wait()
}

// renewChunk sends one statement for keepers, whose turns takeDue took, and settles each. The
// statement is bounded by the latest deadline among them: past it, every one is lost anyway.
func (s *Set) renewChunk(keepers []*Keeper) {
	due := make([]Due, len(keepers))
	timings := make([]Timing, len(keepers))
	var last time.Time
	for i, k := range keepers {
		k.mu.Lock()
		timings[i], last = k.timing, later(last, k.deadline)
		k.mu.Unlock()
		due[i] = Due{k.cfg.Ref, timings[i].TTL}
	}
	start := s.clock.Now()
	ctx, cancel := context.WithTimeout(s.ctx, last.Sub(start))
	defer cancel()
	out, err := s.send(ctx, due)
	for i, k := range keepers {
		var r Renewed
		if err == nil {
			r = out[i]
		}
		k.settleHeartbeat(start, timings[i], r.ExpiresAt, r.Held, err)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Outcomes is what a RenewManyFunc answers from its statement's rows (err, if any, as is).
func Outcomes[R any](rows []R, err error, of func(R) Renewed) ([]Renewed, error) {
	out := make([]Renewed, len(rows))
	for i, r := range rows {
		out[i] = of(r)
	}
	return out, err
}
