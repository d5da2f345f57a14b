package cron

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/retry"
)

// startRun runs a claimed run in its own goroutine; sent is when the claim was sent, on the
// host's clock: the lease began after it.
func (s *Scheduler) startRun(e *entry, c db.PglockCronClaimed, sent time.Time) {
	id, token := db.Deref(c.ID), db.Deref(c.FencingToken)
	run := Run{
		Schedule: e.name, ScheduledTime: db.Deref(c.ScheduledTime), Kind: RunKind(db.Deref(c.Kind)),
		Attempt: int(db.Deref(c.Attempt)), Token: token, Args: e.args,
	}
	s.mu.Lock()
	ctx, cancel := context.WithCancelCause(s.runsCtx)
	s.active[id] = cancel
	why, replaced := s.replaced[id]
	delete(s.replaced, id)
	s.runs.Add(1)
	s.mu.Unlock()
	if replaced {
		cancel(errs.Errorf("%w: %s", pglock.ErrReplaced, why))
	}
	go func() {
		defer s.runs.Done()
		defer func() {
			s.mu.Lock()
			delete(s.active, id)
			s.mu.Unlock()
			cancel(nil)
		}()
		s.execute(ctx, e, run, id, sent, db.Deref(c.LeaseExpiresAt), c.DbNow)
	}()
}

// execute runs fn under the run's lease, then records how it ended.
func (s *Scheduler) execute(ctx context.Context, e *entry, run Run, id int64, sent, expiresAt, started time.Time) {
	label := fmt.Sprintf("cron run %d of %q (tick %s)", id, run.Schedule, run.ScheduledTime.Format(time.RFC3339))
	observed := pglock.Event{Kind: pglock.EventCronRun, Primitive: pglock.PrimitiveCron, Name: run.Schedule, ScheduleKind: e.kind, Mode: pglock.Mode(run.Kind),
		Scheduled: run.ScheduledTime, Started: started, Lag: started.Sub(run.ScheduledTime), Attempt: run.Attempt, Token: run.Token}
	// The events of the lease go to the run's context once Begin has given it: Begin comes
	// after the keeper starts, so that a slow Observer cannot hold up the first renewal.
	var observedCtx atomic.Pointer[context.Context]
	observedCtx.Store(&ctx)
	var background lease.Group
	keeper := lease.New(lease.Config{
		Name: label, Timing: e.set.timing, Start: sent, ExpiresAt: expiresAt,
		Ctx: context.Background(), Clock: s.clock, Tracker: &background, Set: s.renewals, Ref: runRef{id, run.Token},
		OnLost: func(err error, cause pglock.Cause) {
			s.cfg.Logger.Error("pglock: cron run lost its lease", "schedule", run.Schedule, "run", id, "cause", cause, "error", err)
			s.events.Emit(*observedCtx.Load(), pglock.Event{Kind: pglock.EventLost, Primitive: pglock.PrimitiveCron, Name: run.Schedule, ScheduleKind: e.kind,
				Scheduled: run.ScheduledTime, Token: run.Token, Cause: cause, Err: err})
		},
		OnRenewFailed: func(err error, failures int) {
			s.cfg.Logger.Warn("pglock: cron run lease renewal failed; retrying", "schedule", run.Schedule, "run", id,
				"failures", failures, "error", err)
			s.events.Emit(*observedCtx.Load(), pglock.Event{Kind: pglock.EventRenewFailed, Primitive: pglock.PrimitiveCron, Name: run.Schedule, ScheduleKind: e.kind,
				Scheduled: run.ScheduledTime, Token: run.Token, Err: err})
		},
	})
	keeper.Start()
	ctx = s.events.Begin(ctx, observed)
	observedCtx.Store(&ctx)
	fnCtx, stopGuard := keeper.Guard(ctx)
	if e.set.timeout > 0 {
		var cancel context.CancelFunc
		fnCtx, cancel = context.WithTimeoutCause(fnCtx, e.set.timeout,
			errs.Errorf("%s ran past its timeout of %s: %w", label, e.set.timeout, context.DeadlineExceeded))
		defer cancel()
	}
	ran := time.Now()
	fnErr := callRecovering(fnCtx, e.fn, run)
	observed.Run = time.Since(ran)
	stopGuard()
	keeper.Stop()
	background.Wait()

	status := "ran"
	switch {
	case fnErr == nil:
	case errors.Is(context.Cause(ctx), pglock.ErrClosed):
		status = "canceled"
		fnErr = errors.Join(fnErr, context.Cause(ctx))
	default:
		status = "failed"
		if lost := keeper.Err(); lost != nil {
			fnErr = errors.Join(fnErr, lost)
		}
	}
	observed.Outcome, observed.Err = pglock.Outcome(status), fnErr
	if errors.Is(context.Cause(ctx), pglock.ErrReplaced) {
		observed.Outcome = pglock.OutcomeCanceled
		s.events.Emit(ctx, observed)
		return // the newer run recorded this one canceled: there is no outcome left to record
	}
	pending, err := s.finish(e, id, run.Token, status, fnErr)
	if err != nil {
		// Recorded abandoned meanwhile, by a claim that told it, or to be: not this run's count.
		observed.Outcome, observed.Err = pglock.OutcomeNotRecorded, errors.Join(fnErr, err)
	}
	s.events.Emit(ctx, observed)
	switch {
	case errors.Is(err, pglock.ErrLockLost):
		s.cfg.Logger.Warn("pglock: cron run outcome not recorded", "schedule", run.Schedule, "run", id, "status", status, "error", err)
	case err != nil:
		s.cfg.Logger.Error("pglock: cron run outcome not recorded", "schedule", run.Schedule, "run", id, "status", status, "error", err)
	case pending:
		s.wakeUp()
	}
}

// runRef names a running run's row, for renewals.
type runRef struct{ id, token int64 }

// renewMany renews the leases of runs in one statement, and finds why those found gone were.
func (s *Scheduler) renewMany(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	p := db.RenewCronRunsParams{Ids: make([]int64, len(due)), FencingTokens: make([]int64, len(due)), TtlMs: make([]int64, len(due))}
	for i, d := range due {
		r := d.Ref.(runRef)
		p.Ids[i], p.FencingTokens[i], p.TtlMs[i] = r.id, r.token, d.TTL.Milliseconds()
	}
	rows, err := s.queries.RenewCronRuns(ctx, p)
	for i, r := range rows {
		if r.Outcome == "gone" {
			s.explainLoss(ctx, p.Ids[i])
		}
	}
	return lease.Outcomes(rows, err, func(r db.RenewCronRunsRow) (string, time.Time) { return r.Outcome, r.ExpiresAt })
}

// explainLoss tells a run why its row is no longer running: if a newer run replaced it, its
// context is canceled with that cause ([pglock.ErrReplaced]) before the lease is declared lost.
func (s *Scheduler) explainLoss(ctx context.Context, id int64) {
	r, err := s.queries.GetCronRun(ctx, id)
	if err == nil && r.Status == "canceled" {
		s.cancelRun(id, db.Deref(r.Error))
	}
}

// finish records how a run ended, retrying what a failing connection interrupts for as long as
// a lease lasts. pending says the schedule has pending runs to start.
func (s *Scheduler) finish(e *entry, id, token int64, status string, fnErr error) (pending bool, err error) {
	p := db.FinishCronRunParams{ID: id, FencingToken: token, Status: status}
	if fnErr != nil {
		msg := db.ErrorText(fnErr)
		p.Error = &msg
	}
	pending, err = retry.Record(context.Background(), s.clock, e.set.timing.TTL, func(ctx context.Context) (bool, error) {
		return s.queries.FinishCronRun(ctx, p)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, errs.Errorf("%w: run %d was no longer running (abandoned or replaced); that record stands", pglock.ErrLockLost, id)
	case err != nil:
		return false, errs.Errorf("record the outcome of run %d: %w", id, err)
	}
	return pending, nil
}

// callRecovering calls fn, turning a panic into an error with its value and stack: a job that
// panics fails its run, and the scheduler goes on.
func callRecovering(ctx context.Context, fn Func, run Run) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
		}
	}()
	return fn(ctx, run)
}
