package cron

import (
	"context"
	"slices"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// offsetEstimate is the database clock minus the host's, from the sample with the shortest
// round trip.
type offsetEstimate struct {
	offset, uncertainty time.Duration
	at                  time.Time
}

const offsetSamples = 5

// measureOffset reads clock_timestamp() a few times and keeps the reading with the shortest
// round trip, taking the database's reading to be from the middle of it.
func (s *Scheduler) measureOffset(ctx context.Context) error {
	best := offsetEstimate{uncertainty: -1}
	for range offsetSamples {
		sent := s.clock.Now()
		dbNow, err := s.queries.DatabaseNow(ctx)
		if err != nil {
			return errs.Errorf("read the database clock: %w", err)
		}
		received := s.clock.Now()
		half := received.Sub(sent) / 2
		if best.uncertainty < 0 || half < best.uncertainty {
			best = offsetEstimate{offset: dbNow.Sub(sent.Add(half)), uncertainty: half, at: received}
		}
	}
	s.mu.Lock()
	s.offset = best
	s.mu.Unlock()
	s.events.Emit(ctx, pglock.Event{Kind: pglock.EventClockOffset, Primitive: pglock.PrimitiveCron, Offset: best.offset})
	if best.offset > time.Second || best.offset < -time.Second {
		s.cfg.Logger.Warn("pglock: cron: this host's clock differs from the database's; scheduling follows the database",
			"offset", best.offset, "uncertainty", best.uncertainty)
	}
	return nil
}

// observeMissed reports the missed ticks the claim recorded: this instance's claim accounted
// for e's range, so nobody else records them.
func (s *Scheduler) observeMissed(e *entry, ticks []tick) {
	for _, t := range ticks {
		if t.kind == "missed" {
			s.events.Emit(context.Background(), pglock.Event{Kind: pglock.EventCronRun, Primitive: pglock.PrimitiveCron,
				Name: e.name, ScheduleKind: e.kind, Outcome: pglock.OutcomeMissed, Scheduled: t.at, Count: t.missedCount})
		}
	}
}

// dbNow estimates the database's clock now.
func (s *Scheduler) dbNow() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clock.Now().Add(s.offset.offset)
}

// loop claims due ticks, and pending runs, until stopping ends; its statements run under ctx.
// A claim under way when stopping ends completes (unless ctx ends too) and starts what it
// claimed: a claim cut short after it committed would leave its runs to be recorded abandoned.
func (s *Scheduler) loop(stopping, ctx context.Context) {
	defer close(s.loopDone)
	var lastSeen, lastCollect, lastOffset time.Time
	lastOffset = s.clock.Now()
	failures := 0
	for stopping.Err() == nil {
		now, entries := s.clock.Now(), s.snapshot()
		err := s.housekeep(ctx, entries, now, &lastSeen, &lastCollect, &lastOffset)
		var wait time.Duration
		if err == nil {
			wait, err = s.claim(ctx, entries)
		}
		switch {
		case stopping.Err() != nil:
			return
		case err != nil:
			failures++
			s.cfg.Logger.Warn("pglock: cron: claim failed; retrying", "failures", failures, "error", err)
			wait = claimBackoff.Delay(failures)
		default:
			failures = 0
		}
		if wait > 0 && !s.sleep(stopping, wait) {
			return
		}
	}
}

var claimBackoff = backoff.Capped{First: 50 * time.Millisecond, Max: 2 * time.Second}

// housekeep registers schedules added since, and, when their time comes, records that this
// instance still has its schedules, applies retention and measures the clock offset again.
func (s *Scheduler) housekeep(ctx context.Context, entries []*entry, now time.Time, lastSeen, lastCollect, lastOffset *time.Time) error {
	renewed, err := s.syncDefinitions(ctx, now)
	if err != nil {
		return err
	}
	if renewed { // record at once that they are handled
		*lastSeen = time.Time{}
		entries = s.snapshot()
	}
	for _, e := range entries {
		if e.registered || e.kind != "" || now.Before(e.retryAt) {
			continue
		}
		// One schedule the database refuses must not stop the others: it is retried apart.
		if err := s.register(ctx, e); err != nil {
			if ctx.Err() != nil {
				return err
			}
			e.failures++
			e.retryAt = now.Add(claimBackoff.Delay(e.failures))
			s.cfg.Logger.Error("pglock: cron: schedule not registered; retrying", "schedule", e.name,
				"failures", e.failures, "error", err)
			continue
		}
		e.failures = 0
	}
	if now.Sub(*lastSeen) >= s.seenEvery && len(entries) > 0 {
		names := make([]string, len(entries))
		for i, e := range entries {
			names[i] = e.name
		}
		s.mu.Lock()
		offset := s.offset
		s.mu.Unlock()
		gone, err := s.queries.SeenCronSchedules(ctx, db.SeenCronSchedulesParams{Names: names, Instance: s.instance,
			OffsetUs: offset.offset.Microseconds(), UncertaintyUs: max(0, offset.uncertainty.Microseconds())})
		if err != nil {
			return errs.Errorf("record schedules seen: %w", err)
		}
		s.forget(entries, gone)
		*lastSeen = now
	}
	if now.Sub(*lastCollect) >= collectEvery {
		if _, err := s.queries.CollectCronRuns(ctx); err != nil {
			return errs.Errorf("apply run retention: %w", err)
		}
		*lastCollect = now
	}
	if now.Sub(*lastOffset) >= offsetEvery {
		if err := s.measureOffset(ctx); err != nil {
			return err
		}
		*lastOffset = now
	}
	return nil
}

// forget marks the named entries unregistered: an operator deleted their schedules (one
// added in code is registered again; a runtime one goes once its definitions are read again).
func (s *Scheduler) forget(entries []*entry, names []string) {
	for _, e := range entries {
		if slices.Contains(names, e.name) { // names is almost always empty
			s.unregister(e)
		}
	}
}

// unregister stops claiming for e until it is registered again, or, for a runtime schedule,
// its definition read again.
func (s *Scheduler) unregister(e *entry) {
	e.registered = false
	if e.kind != "" {
		s.mu.Lock()
		s.definitionsChanged = true
		s.mu.Unlock()
	}
}

// claim sends one claim for every registered schedule: its due ticks, as its plan says, and
// its pending runs. It starts the runs claimed and returns how long to wait before the next
// claim (0: at once).
func (s *Scheduler) claim(ctx context.Context, entries []*entry) (time.Duration, error) {
	now := s.dbNow()
	p := db.ClaimCronTicksParams{Instance: s.instance, Report: s.events != nil}
	byName := make(map[string]*entry, len(entries))
	untils := make(map[string]time.Time, len(entries))
	ticksOf := make(map[string][]tick, len(entries)) // planned: what the claim records if it accounts for them
	for _, e := range entries {
		if !e.registered {
			continue
		}
		byName[e.name] = e
		var ticks []tick
		until := e.watermark
		if !e.finished {
			ticks, until = plan(e.sched, e.set, e.watermark, now, e.fire)
		}
		untils[e.name] = until
		ticksOf[e.name] = ticks
		p.Names = append(p.Names, e.name)
		p.Seen = append(p.Seen, e.watermark)
		p.Until = append(p.Until, until)
		p.TtlMs = append(p.TtlMs, e.set.timing.TTL.Milliseconds())
		p.Revisions = append(p.Revisions, e.revision)
		for _, t := range ticks {
			p.TickNames = append(p.TickNames, e.name)
			p.TickTimes = append(p.TickTimes, t.at)
			p.TickKinds = append(p.TickKinds, t.kind)
			until := t.missedUntil
			if until.IsZero() {
				until = t.at
			}
			p.MissedUntil = append(p.MissedUntil, until)
			p.MissedCounts = append(p.MissedCounts, t.missedCount)
		}
	}
	if len(p.Names) == 0 {
		return s.nextWait(entries), nil
	}
	sent := s.clock.Now()
	claimed, err := s.queries.ClaimCronTicks(ctx, p)
	if err != nil {
		return 0, errs.Errorf("claim: %w", err)
	}
	// Every answer is taken in before anything can fail: the runs claimed come last, and each
	// must start (or its lease runs out before anyone records it).
	again := time.Duration(-1)
	measure := false
	var unknown error
	for _, c := range claimed {
		e := byName[c.Schedule]
		switch c.Outcome {
		case "run":
			s.startRun(e, c, sent)
			continue
		case "stale":
			e.watermark = db.Deref(c.AccountedUntil)
			again = 0
		case "early":
			// This host's estimate of the database clock was ahead: wait until the tick is due
			// by the database's clock, and measure again.
			measure = true
			if d := untils[c.Schedule].Sub(c.DbNow); again < 0 || d < again {
				again = max(d, time.Millisecond)
			}
		case "unknown", "changed":
			s.unregister(e)
			again = 0
		case "finished":
			// Its ticks after the limit were not recorded: none to tell as missed.
			e.finished = true
			ticksOf[c.Schedule] = nil
			continue
		case "skipped", "abandoned":
			// Recorded by this claim, of this schedule or (abandoned) of any: told here alone.
			name, kind := s.kindOf(ctx, byName[c.Schedule], c.Schedule)
			s.events.Emit(ctx, pglock.Event{Kind: pglock.EventCronRun, Primitive: pglock.PrimitiveCron, Name: name, ScheduleKind: kind,
				Outcome: pglock.Outcome(c.Outcome), Scheduled: db.Deref(c.ScheduledTime), Attempt: int(db.Deref(c.Attempt)),
				Token: db.Deref(c.FencingToken)})
			continue
		default:
			unknown = errs.Errorf("claim answered %q for %q", c.Outcome, c.Schedule)
		}
		delete(untils, c.Schedule)
	}
	for name, until := range untils {
		byName[name].watermark = until
		s.observeMissed(byName[name], ticksOf[name])
	}
	if unknown != nil {
		return 0, unknown
	}
	if measure {
		if err := s.measureOffset(ctx); err != nil {
			return 0, err
		}
	}
	if again >= 0 {
		return again, nil
	}
	return s.nextWait(entries), nil
}

// kindOf is the name and kind an event tells of a schedule: e's, when this instance has it
// (e not nil), else as the database has it (a claim records abandoned the runs of every
// schedule). A schedule deleted meanwhile may have been a runtime one: its name is left out.
func (s *Scheduler) kindOf(ctx context.Context, e *entry, name string) (string, string) {
	if e != nil || s.events == nil {
		return name, e.kindOrNone()
	}
	row, err := s.queries.GetCronSchedule(ctx, name)
	if err != nil {
		return "", ""
	}
	return name, db.Deref(row.Kind)
}

// nextWait is how long the loop sleeps: until the earliest next tick of its schedules, by the
// database's clock, or the poll interval, whichever is sooner.
func (s *Scheduler) nextWait(entries []*entry) time.Duration {
	poll := s.cfg.PollInterval
	now, hostNow := s.dbNow(), s.clock.Now()
	wait := poll
	for _, e := range entries {
		if hb := e.set.timing.Heartbeat; hb > 0 && hb < poll {
			wait = min(wait, hb)
		}
		if !e.registered {
			wait = min(wait, e.retryAt.Sub(hostNow))
			continue
		}
		if next := e.sched.next(e.watermark); !next.IsZero() && !e.finished {
			wait = min(wait, e.fire(next).Sub(now))
		}
	}
	// Wake a little after the tick rather than before: the database refuses early claims.
	s.mu.Lock()
	wait += s.offset.uncertainty
	s.mu.Unlock()
	return max(wait, 0)
}

// sleep waits for d, a wake-up or the end of ctx; false if ctx ended.
func (s *Scheduler) sleep(ctx context.Context, d time.Duration) bool {
	timer := make(chan struct{})
	t := s.clock.AfterFunc(d, func() { close(timer) })
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-timer:
	}
	return true
}
