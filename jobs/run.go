package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/retry"
)

// attemptFunc makes one delivery attempt: it claims the key and, if claimed, runs it. It
// returns the answer's lock key when the key runs elsewhere (OutcomeInProgress).
type attemptFunc func(ctx context.Context, req request) (res Result, lockKey int64, err error)

// deliver delivers a key through attempts, and tells the Observer how the delivery ended.
func (d *Deduper) deliver(ctx context.Context, req request, mode pglock.Mode, attempt attemptFunc) (Result, error) {
	if d.events == nil {
		return d.attempts(ctx, req, attempt)
	}
	res, err := Result{Outcome: OutcomeRan}, errPanicked // what a panic in fn leaves: a failed run
	defer func() { d.delivered(ctx, req, mode, res, err) }()
	res, err = d.attempts(ctx, req, attempt)
	return res, err
}

// delivered tells the Observer how the delivery of req ended.
func (d *Deduper) delivered(ctx context.Context, req request, mode pglock.Mode, res Result, err error) {
	d.events.Emit(ctx, pglock.Event{Kind: pglock.EventJobDelivery, Primitive: pglock.PrimitiveJob, Name: req.scope, Key: req.key,
		Mode: mode, Uniqueness: req.uniqueness(), Outcome: deliveryOutcome(res, err), Attempt: res.Attempts, Token: res.Token, Err: err})
}

// errPanicked is the error a delivery's event reports when fn panicked.
var errPanicked = errors.New("pglock: the job's function panicked")

// attempts makes attempts until one does not find the key running elsewhere, or, without
// Options.Wait, after the first.
func (d *Deduper) attempts(ctx context.Context, req request, attempt attemptFunc) (Result, error) {
	var (
		w     *watch
		next  <-chan struct{} // taken before each claim: a wake during it is not missed
		tries int
	)
	defer func() {
		if w != nil {
			d.stopWaiting(w)
		}
	}()
	for {
		res, lockKey, err := attempt(ctx, req)
		if err != nil || res.Outcome != OutcomeInProgress || !req.wait {
			return res, err
		}
		if req.mode == Supersede {
			// A transaction holds the key (RunTx): each claim asked it to stop; claim again
			// until it has ended.
			if !pollBackoff.Sleep(ctx, clock.Real, tries) {
				return res, errs.Errorf("wait for %s to be superseded: %w", req.label(), context.Cause(ctx))
			}
			tries++
			continue
		}
		if w == nil {
			// Watch (listening, registered), then claim again at once: an outcome committed
			// before the registration was not announced.
			w, next = d.startWaiting(req, lockKey)
			continue
		}
		if err := w.wait(ctx, next); err != nil {
			return res, errs.Errorf("wait for %s: %w", req.label(), err)
		}
		next = w.next()
	}
}

// deliveryOutcome is how a delivery ended, for its event.
func deliveryOutcome(res Result, err error) pglock.Outcome {
	switch {
	case errors.Is(err, pglock.ErrGaveUp):
		return pglock.OutcomeGaveUp
	case errors.Is(err, pglock.ErrFingerprintMismatch):
		return pglock.OutcomeFingerprintMismatch
	case errors.Is(err, pglock.ErrSuperseded):
		return pglock.OutcomeSuperseded
	case res.Outcome == OutcomeRan && err != nil:
		return pglock.OutcomeFailed
	case err != nil:
		return pglock.OutcomeError
	case res.Outcome == OutcomeAlreadyDone:
		return pglock.OutcomeAlreadyDone
	case res.Outcome == OutcomeInProgress:
		return pglock.OutcomeInProgress
	}
	return pglock.OutcomeRan
}

// beginRun tells the Observer that an attempt is about to run fn, and returns fn's context and
// the function that reports how it ended.
func (d *Deduper) beginRun(ctx context.Context, req request, mode pglock.Mode, res Result) (context.Context, func(error)) {
	if d.events == nil {
		return ctx, func(error) {}
	}
	e := pglock.Event{Kind: pglock.EventJobRun, Primitive: pglock.PrimitiveJob, Name: req.scope, Key: req.key,
		Mode: mode, Uniqueness: req.uniqueness(), Attempt: res.Attempts, Token: res.Token}
	runCtx, start := d.events.Begin(ctx, e), time.Now()
	return runCtx, func(err error) {
		e.Run, e.Outcome, e.Err = time.Since(start), pglock.OutcomeRan, err
		switch {
		case errors.Is(err, pglock.ErrSuperseded):
			e.Outcome = pglock.OutcomeSuperseded
		case err != nil:
			e.Outcome = pglock.OutcomeFailed
		}
		d.events.Emit(runCtx, e)
	}
}

// answer maps a claim's answer to a Result, and to the error of a delivery that may not run.
func (req request) answer(a db.ClaimJobRow) (Result, error) {
	res := Result{
		Attempts: int(db.Deref(a.Attempts)), Token: db.Deref(a.FencingToken),
		StartedAt: db.Deref(a.StartedAt), FinishedAt: db.Deref(a.FinishedAt), Saved: json.RawMessage(a.Result),
	}
	switch a.Outcome {
	case "claimed":
		res.Outcome = OutcomeRan
	case "done":
		res.Outcome = OutcomeAlreadyDone
	case "running":
		res.Outcome = OutcomeInProgress
	case "mismatch":
		return Result{}, errs.Errorf("%w: %s was first delivered with fingerprint %q, now %q",
			pglock.ErrFingerprintMismatch, req.label(), db.Deref(a.Fingerprint), db.Deref(req.fingerprint))
	case "gave_up":
		last := "its runner vanished before recording an outcome (its lease expired)"
		if db.Deref(a.Status) == string(StatusFailed) {
			last = "the last error: " + db.Deref(a.LastError)
		}
		return Result{}, errs.Errorf("%w: %s was attempted %d times; %s", pglock.ErrGaveUp, req.label(), db.Deref(a.Attempts), last)
	default:
		return Result{}, errs.Errorf("claim of %s: unknown outcome %q", req.label(), a.Outcome)
	}
	return res, nil
}

// claimParams are the parameters of a claim outside a transaction, under a lease.
func (d *Deduper) claimParams(req request, holder string) db.ClaimJobParams {
	return db.ClaimJobParams{
		Scope: req.scope, JobKey: req.key, HolderID: holder, Instance: d.instance, TtlMs: req.timing.TTL.Milliseconds(),
		Fingerprint: req.fingerprint, WindowMs: req.window.Milliseconds(), MaxAttempts: req.maxAttempts,
		Mode: req.mode.sqlName(), PeriodMs: req.periodMs(),
	}
}

func (d *Deduper) run(ctx context.Context, key string, opts *Options, fn func(ctx context.Context) (json.RawMessage, error)) (Result, error) {
	req, err := d.newRequest(key, opts)
	if err != nil {
		return Result{}, err
	}
	return d.deliver(ctx, req, pglock.ModeRun, func(ctx context.Context, req request) (Result, int64, error) {
		start := time.Now()
		a, err := d.queries.ClaimJob(ctx, d.claimParams(req, ident.NewHolderID()))
		if err != nil {
			return Result{}, 0, errs.Errorf("claim %s: %w", req.label(), err)
		}
		res, err := req.answer(a)
		if err != nil || res.Outcome != OutcomeRan {
			return res, db.Deref(a.LockKey), err
		}
		return d.runLeased(ctx, req, res, start, db.Deref(a.LeaseExpiresAt), fn)
	})
}

// attempt names a running attempt's row (or a debounced run's), for renewals.
type attempt struct {
	scope, key string
	token      int64
}

// renewParams names the attempts (or debounced runs) of due, with their TTLs, as the renewal
// statements take them.
func renewParams(due []lease.Due) db.RenewJobsParams {
	p := db.RenewJobsParams{Scopes: make([]string, len(due)), JobKeys: make([]string, len(due)),
		FencingTokens: make([]int64, len(due)), TtlMs: make([]int64, len(due))}
	for i, d := range due {
		a := d.Ref.(attempt)
		p.Scopes[i], p.JobKeys[i], p.FencingTokens[i], p.TtlMs[i] = a.scope, a.key, a.token, d.TTL.Milliseconds()
	}
	return p
}

// renewMany renews the leases of attempts in one statement.
func (d *Deduper) renewMany(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	rows, err := d.queries.RenewJobs(ctx, renewParams(due))
	return lease.Outcomes(rows, err, func(r db.RenewJobsRow) (string, time.Time) { return r.Outcome, r.ExpiresAt })
}

// runLeased runs fn under the lease of the attempt just claimed, then records its outcome.
func (d *Deduper) runLeased(ctx context.Context, req request, res Result, start, expiresAt time.Time,
	fn func(ctx context.Context) (json.RawMessage, error)) (Result, int64, error) {
	// The events of the lease go to the run's context once Begin has given it: Begin comes
	// after the keeper starts, so that a slow Observer cannot hold up the first renewal.
	var observedCtx atomic.Pointer[context.Context]
	observedCtx.Store(&ctx)
	var background lease.Group
	keeper := lease.New(lease.Config{
		Name: req.key, Timing: req.timing, Start: start, ExpiresAt: expiresAt,
		Ctx: context.Background(), Tracker: &background, Set: d.renewals, Ref: attempt{req.scope, req.key, res.Token},
		OnLost: func(err error, cause pglock.Cause) {
			d.cfg.Logger.Error("pglock: job attempt lost its lease", "job", req.key, "scope", req.scope, "token", res.Token, "cause", cause, "error", err)
			d.events.Emit(*observedCtx.Load(), pglock.Event{Kind: pglock.EventLost, Primitive: pglock.PrimitiveJob, Name: req.scope, Key: req.key,
				Uniqueness: req.uniqueness(), Token: res.Token, Attempt: res.Attempts, Cause: cause, Err: err})
		},
		OnRenewFailed: func(err error, failures int) {
			d.cfg.Logger.Warn("pglock: job lease renewal failed; retrying", "job", req.key, "scope", req.scope, "failures", failures, "error", err)
			d.events.Emit(*observedCtx.Load(), pglock.Event{Kind: pglock.EventRenewFailed, Primitive: pglock.PrimitiveJob, Name: req.scope, Key: req.key,
				Uniqueness: req.uniqueness(), Token: res.Token, Attempt: res.Attempts, Err: err})
		},
	})
	keeper.Start()
	ctx, ran := d.beginRun(ctx, req, pglock.ModeRun, res)
	observedCtx.Store(&ctx)
	// A supersession cancels fn's context before the lease is declared lost, so that its cause
	// is the first: ErrSuperseded.
	supersedable, supersede := context.WithCancelCause(ctx)
	guarded, stop := keeper.Guard(supersedable)
	run := &running{scope: req.scope, key: req.key, label: req.label(), token: res.Token,
		payload: strconv.FormatInt(res.Token, 10), supersede: func(err error) {
			supersede(err)
			keeper.Lose(pglock.CauseSuperseded, err)
		}}
	fnCtx := context.WithValue(guarded, attemptKey{}, run)
	run.ctx = fnCtx
	untrack := func() {}
	if req.mode == Supersede {
		untrack = d.track(run)
		// A supersession that committed between the claim and the tracking was announced to
		// nobody here: look once.
		d.checkAttempt(run)
	}
	// Stopped before the outcome is written: a renewal after it would find the attempt gone.
	stopKeeping := func() {
		untrack()
		stop()
		supersede(nil)
		keeper.Stop()
		background.Wait()
	}
	saved, fnErr := callRecovering(func() (json.RawMessage, error) { return fn(fnCtx) }, func(panicked error) {
		stopKeeping()
		ran(panicked)
		d.finish(ctx, req, res.Token, nil, panicked)
	})
	stopKeeping()
	superseded := d.supersededErr(req, res.Token, keeper.Err())
	ran(errors.Join(fnErr, superseded))
	finishedAt, err := d.finish(ctx, req, res.Token, saved, fnErr)
	res.FinishedAt = finishedAt
	if superseded == nil && errors.Is(err, pglock.ErrLockLost) {
		superseded = d.supersededErr(req, res.Token, err) // refused before the announcement came
	}
	if fnErr != nil {
		// Why fn failed may be that its lease was lost.
		lost := keeper.Err()
		if superseded != nil {
			lost = superseded
		}
		return res, 0, errors.Join(fnErr, lost, err)
	}
	// An outcome recorded stands, lease lost or not: nobody else ran the key.
	if err != nil {
		err = errors.Join(superseded, err)
	}
	return res, 0, err
}

// finish records an attempt's outcome, retrying what a failing connection interrupts for as
// long as the lease lasted; an error says the outcome was not recorded.
func (d *Deduper) finish(ctx context.Context, req request, token int64, saved json.RawMessage, fnErr error) (time.Time, error) {
	params := finishParams(req, token, saved, fnErr)
	finishedAt, err := retry.Record(ctx, clock.Real, req.timing.TTL, func(ctx context.Context) (time.Time, error) {
		return d.queries.FinishJob(ctx, params)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return time.Time{}, errs.Errorf("%w: %s was taken over or forgotten while this attempt (token %d) ran; its outcome was not recorded",
			pglock.ErrLockLost, req.label(), token)
	case err != nil:
		return time.Time{}, errs.Errorf("record the outcome of %s (it will run again once its lease expires): %w", req.label(), err)
	}
	return finishedAt, nil
}

func finishParams(req request, token int64, saved json.RawMessage, fnErr error) db.FinishJobParams {
	p := db.FinishJobParams{
		Scope: req.scope, JobKey: req.key, FencingToken: token, Succeeded: fnErr == nil,
		WindowMs: req.window.Milliseconds(),
	}
	if fnErr != nil {
		msg := db.ErrorText(fnErr)
		p.Error = &msg
	} else {
		p.Result = saved
	}
	return p
}

// callRecovering calls fn; if fn panics, it calls failed with the panic as an error, then
// panics again with the same value; if fn ends its goroutine (runtime.Goexit, as t.FailNow
// does), it calls failed and lets the goroutine end.
func callRecovering[T any](fn func() (T, error), failed func(panicked error)) (T, error) {
	panicking := true
	defer func() {
		if !panicking {
			return
		}
		v := recover()
		if v == nil {
			failed(errors.New("fn called runtime.Goexit"))
			return
		}
		failed(fmt.Errorf("panic: %v", v))
		panic(v)
	}()
	v, err := fn()
	panicking = false
	return v, err
}
