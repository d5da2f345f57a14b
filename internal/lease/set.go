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
// A tick renews every lease due by then, and every lease due within a tenth of its heartbeat
// after: leases that go together are due together from then on, so a Set with many leases
// settles to at most ten ticks per heartbeat (each in statements of SetConfig.Batch), however
// they were acquired. A failed statement fails every lease in it, each retried as its own
// heartbeat would be and lost at its own deadline.
type Set struct {
	cfg   SetConfig
	clock clock.Clock

	mu      sync.Mutex
	members map[*Keeper]struct{}
	timer   clock.Timer
	wakeAt  time.Time // when timer fires; zero while it is not armed
	ticking bool      // a tick is under way: it arms the timer when it ends
	pending time.Time // the earliest wake asked for while ticking
	renewed int       // statements sent
	// How far renewals are behind: oldest is since when the longest-waiting lease of the tick
	// under way not yet answered has been due, and limit half the shortest heartbeat among its
	// leases; lag how long the longest-waiting lease of the last tick waited; late the leases
	// whose last renewal got through more than half their heartbeat after it was due, until
	// their next one does (or they leave). The Set is saturated while any is late.
	oldest     time.Time
	lag, limit time.Duration
	late       map[*Keeper]struct{}
	saturated  bool // as OnLag was last told
}

// SetConfig describes a Set. Renew and Ctx are required.
type SetConfig struct {
	Renew   RenewManyFunc
	Ctx     context.Context // ticks run under it: it ends with the owner
	Clock   clock.Clock     // default: clock.Real
	Tracker Tracker         // default: none
	// Batch is how many leases one statement renews at most. Default: MaxBatch.
	Batch int
	// OnLag, when set, is called at the end of every tick while the Set is saturated (Lag past
	// half a heartbeat), and at the first tick that finds it no longer is.
	OnLag func(lag time.Duration, saturated bool)
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

// Renewed is a renewal's outcome: the lease's new expiry by the database's clock (Held), or
// Busy when another transaction had its row locked (a fence) and it was passed over, to be
// renewed again shortly; neither when its row is no longer the holder's.
type Renewed struct {
	ExpiresAt time.Time
	Held      bool
	Busy      bool
}

// RenewManyFunc renews every lease in due in one statement, and answers an outcome for each,
// in the same order.
type RenewManyFunc func(ctx context.Context, due []Due) ([]Renewed, error)

// NewSet returns a Set.
func NewSet(cfg SetConfig) *Set {
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real
	}
	if cfg.Batch <= 0 {
		cfg.Batch = MaxBatch
	}
	return &Set{cfg: cfg, clock: clk, members: map[*Keeper]struct{}{}, late: map[*Keeper]struct{}{}}
}

// Lag is how far renewals are behind: how long the lease that waited longest for a renewal to
// get through, since its heartbeat was due, had waited at the end of the last tick, or has
// waited so far in the tick under way. Renewals that fail, or a database or pool that cannot
// keep up, make it grow, well before any lease is lost.
func (s *Set) Lag() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lagLocked()
}

func (s *Set) lagLocked() time.Duration {
	if s.ticking && !s.oldest.IsZero() {
		return max(s.lag, s.clock.Now().Sub(s.oldest))
	}
	return s.lag
}

// Saturated reports whether renewals are more than half a heartbeat behind: a lease whose
// renewal got through (or, in the tick under way, has not yet) more than half its heartbeat
// after it was due. A renewal that takes longer than that leaves too little of the lease for
// the next one to be retried, so the leases held come first, and their owner should take no
// new ones.
func (s *Set) Saturated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saturatedLocked()
}

func (s *Set) saturatedLocked() bool {
	return len(s.late) > 0 || (s.ticking && !s.oldest.IsZero() && s.clock.Now().Sub(s.oldest) > s.limit)
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

// renewOne renews one lease in a statement of its own (an explicit Renew), again with backoff
// while its row is busy, as long as ctx allows.
func (s *Set) renewOne(ctx context.Context, ref any, ttl time.Duration) (time.Time, bool, error) {
	for attempt := 1; ; attempt++ {
		out, err := s.send(ctx, []Due{{ref, ttl}})
		switch {
		case err != nil:
			return time.Time{}, false, err
		case !out[0].Busy:
			return out[0].ExpiresAt, out[0].Held, nil
		case !RetryBackoff(time.Second).Sleep(ctx, s.clock, attempt):
			return time.Time{}, false, errs.Errorf("its row stayed locked by another transaction: %w", contextError(ctx))
		}
	}
}

func (s *Set) send(ctx context.Context, due []Due) ([]Renewed, error) {
	s.mu.Lock()
	s.renewed++
	s.mu.Unlock()
	out, err := s.cfg.Renew(ctx, due)
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
	delete(s.late, k)
	if len(s.members) > 0 {
		return
	}
	// Nothing left to renew: no tick fires after its owner is done, and nothing is behind.
	if s.timer != nil && !s.ticking {
		s.timer.Stop()
		s.wakeAt = time.Time{}
	}
	s.lag = 0
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
	if s.cfg.Tracker != nil {
		if !s.cfg.Tracker.Begin() {
			return // the owner has stopped
		}
		defer s.cfg.Tracker.End()
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
	var (
		due  []dueLease
		beat time.Duration
	)
	for _, k := range members {
		if since, heartbeat, ok := k.takeDue(now); ok {
			due = append(due, dueLease{k, since, heartbeat})
			if beat == 0 || heartbeat < beat {
				beat = heartbeat
			}
		}
	}
	if len(due) > 0 {
		// The longest-waiting first: a tick of many statements renews them first.
		slices.SortFunc(due, func(a, b dueLease) int { return a.since.Compare(b.since) })
		s.mu.Lock()
		s.oldest, s.limit = due[0].since, beat/2
		s.mu.Unlock()
		s.measure(s.renewAll(due))
	}

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

// dueLease is a lease a tick renews, since when a heartbeat of it has been due, and its
// heartbeat.
type dueLease struct {
	k         *Keeper
	since     time.Time
	heartbeat time.Duration
}

// measure records how far the tick that ended found renewals behind, and tells OnLag while
// the Set is saturated, and once when it no longer is.
func (s *Set) measure(lag time.Duration) {
	s.mu.Lock()
	if len(s.members) == 0 {
		lag = 0 // every lease the tick renewed is gone: nothing is behind
	}
	s.lag, s.oldest = lag, time.Time{}
	lag, saturated, was := s.lag, s.saturatedLocked(), s.saturated
	s.saturated = saturated
	s.mu.Unlock()
	if s.cfg.OnLag != nil && (saturated || was) {
		s.cfg.OnLag(lag, saturated)
	}
}

// renewAll renews due (the longest-waiting first) in chunks of MaxBatch, MaxInFlight at a
// time, and returns how long the longest-waiting lease of any chunk waited, from its heartbeat
// to its chunk's answer. While chunks are under way, oldest is the longest-waiting lease of
// those not yet answered.
func (s *Set) renewAll(due []dueLease) (lag time.Duration) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		pending []time.Time // each unanswered chunk's longest-waiting lease, in chunk order
	)
	slots := make(chan struct{}, MaxInFlight)
	chunks := slices.Collect(slices.Chunk(due, s.cfg.Batch))
	for _, chunk := range chunks {
		pending = append(pending, chunk[0].since)
	}
	for i, chunk := range chunks {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			answered := s.renewChunk(chunk)
			mu.Lock()
			defer mu.Unlock()
			lag = max(lag, answered.Sub(chunk[0].since))
			pending[i] = time.Time{}
			oldest := time.Time{}
			for _, since := range pending {
				if !since.IsZero() && (oldest.IsZero() || since.Before(oldest)) {
					oldest = since
				}
			}
			s.mu.Lock()
			s.oldest = oldest
			for _, l := range chunk {
				if _, kept := s.members[l.k]; kept && answered.Sub(l.since) > l.heartbeat/2 {
					s.late[l.k] = struct{}{}
				} else {
					delete(s.late, l.k)
				}
			}
			s.mu.Unlock()
		})
	}
	wg.Wait()
	return max(lag, 0)
}

// renewChunk sends one statement for leases, whose turns takeDue took, settles each, and
// returns when the answer came. The statement is bounded by the latest deadline among them:
// past it, every one is lost anyway.
func (s *Set) renewChunk(leases []dueLease) time.Time {
	due := make([]Due, len(leases))
	timings := make([]Timing, len(leases))
	var last time.Time
	for i, l := range leases {
		l.k.mu.Lock()
		timings[i], last = l.k.timing, later(last, l.k.deadline)
		l.k.mu.Unlock()
		due[i] = Due{l.k.cfg.Ref, timings[i].TTL}
	}
	start := s.clock.Now()
	ctx, cancel := context.WithTimeout(s.cfg.Ctx, last.Sub(start))
	defer cancel()
	out, err := s.send(ctx, due)
	answered := s.clock.Now()
	for i, l := range leases {
		var r Renewed
		if err == nil {
			r = out[i]
		}
		l.k.settleHeartbeat(start, timings[i], r, err)
	}
	return answered
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Outcomes is what a RenewManyFunc answers from its statement's rows (err, if any, as is):
// of gives a row's outcome, as the contract's functions name it ('renewed', 'busy' or 'gone'),
// and its expiry.
func Outcomes[R any](rows []R, err error, of func(R) (outcome string, expiresAt time.Time)) ([]Renewed, error) {
	out := make([]Renewed, len(rows))
	for i, r := range rows {
		outcome, expiresAt := of(r)
		out[i] = Renewed{ExpiresAt: expiresAt, Held: outcome == "renewed", Busy: outcome == "busy"}
	}
	return out, err
}
