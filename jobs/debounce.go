package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/notify"
)

// MaxPayload is how large a debounced delivery's payload may be, as JSON.
const MaxPayload = 64 << 10

// The defaults of RunnerOptions.
const (
	DefaultWorkers      = 1
	DefaultRetryDelay   = 5 * time.Second
	DefaultPollInterval = 10 * time.Second
)

// DebounceOptions configure a debounced delivery. Quiet and MaxWait have no default: they are
// the debounce.
type DebounceOptions struct {
	// Scope namespaces the key, as Options.Scope does. Default: Config.Scope.
	Scope string
	// Quiet is the quiet period: the key runs once no delivery of it came for this long.
	// Whole milliseconds, at least 1 ms.
	Quiet time.Duration
	// MaxWait bounds the wait: the key runs no later than this after the first delivery of
	// its pending cycle, however steadily deliveries come. Whole milliseconds, from Quiet to
	// MaxWindow.
	MaxWait time.Duration
}

// Pending is what a debounced delivery left pending.
type Pending struct {
	// DueAt is when the key is due to run, by the database's clock, unless another delivery
	// comes first (which moves it later, never past the cycle's first delivery plus MaxWait).
	DueAt time.Time
	// Deliveries counts the pending cycle's deliveries, this one included.
	Deliveries int
	// Running says a run of the key is under way: this delivery waits for the next one.
	Running bool
}

// Debounce delivers key debounced: payload (encoded as JSON, at most MaxPayload bytes) becomes
// the key's pending payload, replacing the pending delivery before it, and the key is due to run
// opts.Quiet after this delivery, but no later than opts.MaxWait after the pending cycle's first,
// on the database's clock. A runner of the scope (RunDebounced, on any instance) then runs it
// once, with the latest payload. A delivery while the key runs starts the next pending cycle.
// Bad input gets an error matching [pglock.ErrInvalidArgument], and records nothing.
func (d *Deduper) Debounce(ctx context.Context, key string, payload any, opts DebounceOptions) (Pending, error) {
	invalid := func(format string, args ...any) (Pending, error) {
		return Pending{}, errs.Errorf("%w: "+format, append([]any{pglock.ErrInvalidArgument}, args...)...)
	}
	if err := checkKey(key); err != nil {
		return Pending{}, err
	}
	scope := opts.Scope
	if scope == "" {
		scope = d.cfg.Scope
	}
	if err := checkScope(scope); err != nil {
		return invalid("DebounceOptions.Scope %v", err)
	}
	switch {
	case opts.Quiet < time.Millisecond || opts.Quiet%time.Millisecond != 0:
		return invalid("DebounceOptions.Quiet (%s) must be whole milliseconds, at least 1 ms", opts.Quiet)
	case opts.MaxWait < opts.Quiet || opts.MaxWait > MaxWindow || opts.MaxWait%time.Millisecond != 0:
		return invalid("DebounceOptions.MaxWait (%s) must be whole milliseconds from Quiet (%s) to %s", opts.MaxWait, opts.Quiet, MaxWindow)
	}
	encoded, err := json.Marshal(payload)
	switch {
	case err != nil:
		return invalid("the payload of %.80q cannot be encoded as JSON: %v", key, err)
	case len(encoded) > MaxPayload:
		return invalid("the payload of %.80q is %d bytes of JSON, the limit is %d", key, len(encoded), MaxPayload)
	case ident.HoldsNUL(encoded):
		return invalid("the payload of %.80q holds the NUL character, which PostgreSQL's jsonb cannot", key)
	}
	row, err := d.queries.Debounce(ctx, db.DebounceParams{Scope: scope, JobKey: key, Payload: encoded,
		QuietMs: opts.Quiet.Milliseconds(), MaxWaitMs: opts.MaxWait.Milliseconds()})
	d.events.Emit(ctx, pglock.Event{Kind: pglock.EventJobDelivery, Primitive: pglock.PrimitiveJob, Name: scope, Key: key,
		Uniqueness: debounce, Outcome: debounceOutcome(err), Attempt: int(row.Deliveries), Err: err})
	if err != nil {
		return Pending{}, errs.Errorf("debounce %.80q: %w", key, err)
	}
	return Pending{DueAt: row.DueAt, Deliveries: int(row.Deliveries), Running: row.Running}, nil
}

// debounce names debounced deliveries and runs in their events.
const debounce = "debounce"

func debounceOutcome(err error) pglock.Outcome {
	if err != nil {
		return pglock.OutcomeError
	}
	return pglock.OutcomeDebounced
}

// DebouncedRun is one run of a debounced key.
type DebouncedRun struct {
	Key        string
	Payload    json.RawMessage // the latest delivery's, as JSON
	Deliveries int             // the deliveries this run answers
	FirstAt    time.Time       // the first of them, by the database's clock
	Attempt    int             // from 1; a run that failed, or whose runner vanished, runs again
	Token      int64           // the attempt's fencing token
}

// RunnerOptions configure RunDebounced. A nil *RunnerOptions, and every zero field, means the
// default.
type RunnerOptions struct {
	// Scope is the scope whose keys run. Default: Config.Scope.
	Scope string
	// Workers is how many keys run at once in this runner. Default: DefaultWorkers.
	Workers int
	// TTL is a run's lease, renewed every third of it; a run whose runner vanished runs again
	// once it expires. From 100 ms to 24 h. Default: DefaultTTL.
	TTL time.Duration
	// RetryDelay is how long after a failed run it runs again. Default: DefaultRetryDelay.
	RetryDelay time.Duration
	// PollInterval is how often the runner looks for ready keys when no announcement wakes it
	// (with Config.DisableNotifications, it is all it has). Default: DefaultPollInterval.
	PollInterval time.Duration
}

// RunDebounced runs the debounced keys of a scope as they become due, until ctx ends, then
// waits for the runs under way and returns nil (or an error matching
// [pglock.ErrInvalidArgument] for bad options). Runners on many instances share the keys: each
// due key runs on one of them, under a lease with a fencing token. fn gets a transaction: what
// it writes commits with the end of the run, so a run's effects in this database commit once.
// If fn fails (or panics: the panic is recovered, and logged with its stack), the transaction
// rolls back and the run, with its payload and deliveries, runs again after RetryDelay; if its runner vanishes, once its lease expires. If the
// lease is lost, fn's context is canceled with cause [pglock.ErrLockLost], and its transaction
// cannot commit.
func (d *Deduper) RunDebounced(ctx context.Context, opts *RunnerOptions, fn func(ctx context.Context, tx pgx.Tx, run DebouncedRun) error) error {
	r, err := d.newRunner(opts, fn)
	if err != nil {
		return err
	}
	return r.run(ctx)
}

// runner is one RunDebounced.
type runner struct {
	d      *Deduper
	o      RunnerOptions
	timing lease.Timing
	fn     func(ctx context.Context, tx pgx.Tx, run DebouncedRun) error
	wake   chan struct{} // an announcement, or a run that ended
	runs   sync.WaitGroup
	free   chan struct{} // a token per idle worker
}

func (d *Deduper) newRunner(opts *RunnerOptions, fn func(ctx context.Context, tx pgx.Tx, run DebouncedRun) error) (*runner, error) {
	var o RunnerOptions
	if opts != nil {
		o = *opts
	}
	if o.Scope == "" {
		o.Scope = d.cfg.Scope
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	invalid := func(format string, args ...any) (*runner, error) {
		return nil, errs.Errorf("%w: "+format, append([]any{pglock.ErrInvalidArgument}, args...)...)
	}
	switch {
	case fn == nil:
		return invalid("nil fn")
	case checkScope(o.Scope) != nil:
		return invalid("RunnerOptions.Scope %v", checkScope(o.Scope))
	case o.Workers < 1 || o.Workers > 1000:
		return invalid("RunnerOptions.Workers (%d) must be from 1 to 1000", o.Workers)
	case o.RetryDelay < 0 || o.RetryDelay > MaxWindow:
		return invalid("RunnerOptions.RetryDelay (%s) must be from 0 to %s", o.RetryDelay, MaxWindow)
	case o.PollInterval < 10*time.Millisecond:
		return invalid("RunnerOptions.PollInterval (%s) must be at least 10 ms", o.PollInterval)
	}
	timing, err := lease.NewTiming(o.TTL, 0, 0)
	if err != nil {
		return nil, errs.Errorf("RunnerOptions.TTL: %w", err)
	}
	r := &runner{d: d, o: o, timing: timing, fn: fn, wake: make(chan struct{}, 1), free: make(chan struct{}, o.Workers)}
	for range o.Workers {
		r.free <- struct{}{}
	}
	return r, nil
}

func (r *runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *runner) run(ctx context.Context) error {
	if !r.d.cfg.DisableNotifications {
		unsubscribe := notify.Subscribe(r.d.pool, r.d.cfg.ListenerConnConfig, r.d.cfg.Logger, db.DebounceChannel, notify.Handler{
			Notify: func(scope string) {
				if scope == r.o.Scope {
					r.signal()
				}
			},
			Listening: r.signal,
		})
		defer unsubscribe()
	}
	defer r.runs.Wait()
	for busy := 0; ; busy++ {
		claimed, sleep, err := r.claim(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.d.cfg.Logger.Warn("pglock: claim of debounced keys failed; retrying", "scope", r.o.Scope, "error", err)
			sleep = min(r.o.PollInterval, pollBackoff.Delay(busy))
		} else if claimed == 0 && sleep == 0 {
			// A ready key another runner is claiming or finishing: look again shortly.
			sleep = pollBackoff.Delay(busy)
		} else {
			busy = 0
		}
		if sleep < 0 || sleep > r.o.PollInterval {
			sleep = r.o.PollInterval
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// claim claims as many ready keys as there are idle workers and starts their runs; it returns
// how many it claimed and how long the runner may sleep (negative: until woken or polling).
func (r *runner) claim(ctx context.Context) (claimed int, sleep time.Duration, err error) {
	idle := 0
	for len(r.free) > 0 {
		<-r.free
		idle++
	}
	defer func() {
		for range idle - claimed {
			r.free <- struct{}{}
		}
	}()
	if idle > 0 {
		sent := time.Now() // the leases begin after it
		rows, err := r.d.queries.ClaimDebounced(ctx, db.ClaimDebouncedParams{Scope: r.o.Scope, Instance: r.d.instance,
			TtlMs: r.timing.TTL.Milliseconds(), MaxKeys: int32(idle)})
		if err != nil {
			return 0, 0, errs.Errorf("claim the debounced keys of scope %q: %w", r.o.Scope, err)
		}
		for _, row := range rows {
			r.runs.Add(1)
			go func() {
				defer func() {
					r.free <- struct{}{}
					r.signal()
					r.runs.Done()
				}()
				r.execute(ctx, row, sent)
			}()
		}
		claimed = len(rows)
		if claimed == idle {
			return claimed, 0, nil // more may be ready: look again once a worker is idle
		}
	}
	if idle == 0 {
		return 0, -1, nil // woken when a run ends
	}
	ms, err := r.d.queries.NextDebounced(ctx, r.o.Scope)
	if err != nil {
		return claimed, 0, errs.Errorf("next debounced key of scope %q: %w", r.o.Scope, err)
	}
	if ms < 0 {
		return claimed, -1, nil
	}
	return claimed, time.Duration(ms) * time.Millisecond, nil
}

// renewDebounced renews the leases of debounced runs in one statement.
func (d *Deduper) renewDebounced(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	rows, err := d.queries.RenewDebounced(ctx, db.RenewDebouncedParams(renewParams(due)))
	return lease.Outcomes(rows, err, func(r db.RenewDebouncedRow) (string, time.Time) { return r.Outcome, r.ExpiresAt })
}

// execute runs one claimed key under its lease, in a transaction that its finish ends.
func (r *runner) execute(ctx context.Context, c db.ClaimDebouncedRow, sent time.Time) {
	d := r.d
	run := DebouncedRun{Key: c.JobKey, Payload: c.Payload, Deliveries: int(c.Deliveries), FirstAt: c.FirstAt,
		Attempt: int(c.Attempts), Token: c.FencingToken}
	label := (request{scope: r.o.Scope, key: c.JobKey}).label()
	var background lease.Group
	keeper := lease.New(lease.Config{
		Name: c.JobKey, Timing: r.timing, Start: sent, ExpiresAt: c.LeaseExpiresAt,
		Ctx: context.Background(), Tracker: &background, Set: d.debounceRenewals,
		Ref: attempt{r.o.Scope, c.JobKey, c.FencingToken},
		OnLost: func(err error, cause pglock.Cause) {
			d.cfg.Logger.Error("pglock: debounced run lost its lease", "job", c.JobKey, "scope", r.o.Scope, "token", c.FencingToken, "cause", cause, "error", err)
			d.events.Emit(ctx, pglock.Event{Kind: pglock.EventLost, Primitive: pglock.PrimitiveJob, Name: r.o.Scope, Key: c.JobKey,
				Uniqueness: debounce, Token: c.FencingToken, Attempt: run.Attempt, Cause: cause, Err: err})
		},
		OnRenewFailed: func(err error, failures int) {
			d.cfg.Logger.Warn("pglock: debounced run's lease renewal failed; retrying", "job", c.JobKey, "scope", r.o.Scope, "failures", failures, "error", err)
		},
	})
	keeper.Start()
	runCtx, ran := d.beginRun(ctx, request{scope: r.o.Scope, key: c.JobKey, mode: Mode{name: debounce}},
		pglock.ModeRunTx, Result{Attempts: run.Attempt, Token: run.Token})
	fnCtx, stop := keeper.Guard(context.WithoutCancel(runCtx))
	// Stopped once the run committed or failed: a renewal after the commit would find the run
	// gone, and one after a failure would put its retry off.
	stopKeeping := sync.OnceFunc(func() {
		stop()
		keeper.Stop()
		background.Wait()
	})
	defer stopKeeping()

	var tx pgx.Tx
	err := func() (err error) {
		// A panic in fn is the run's failure, retried as any other: the runner's goroutine is
		// the library's, and nothing above it could recover.
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
			}
		}()
		if tx, err = d.pool.Begin(fnCtx); err != nil {
			return err
		}
		if ms := d.cfg.TxIdleTimeout.Milliseconds(); ms > 0 {
			// A runner that vanishes mid-transaction holds the key's row no longer (see
			// Config.TxIdleTimeout).
			if _, err := tx.Exec(fnCtx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, strconv.FormatInt(ms, 10)); err != nil {
				return err
			}
		}
		if err := r.fn(fnCtx, tx, run); err != nil {
			return err
		}
		if _, err := db.New(tx).FinishDebounced(fnCtx, db.FinishDebouncedParams{Scope: r.o.Scope, JobKey: c.JobKey, FencingToken: c.FencingToken}); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errs.Errorf("%w: %s was taken over while this run (token %d) ran; its writes were rolled back", pglock.ErrLockLost, label, c.FencingToken)
			}
			return err
		}
		err = tx.Commit(fnCtx)
		if err == nil {
			stopKeeping()
		}
		return err
	}()
	if err != nil {
		lost := keeper.Err()
		stopKeeping()
		r.ended(c, tx, errors.Join(err, lost))
	}
	ran(err)
}

// ended rolls back a run that did not commit, and records its failure, so that it runs again
// after RetryDelay.
func (r *runner) ended(c db.ClaimDebouncedRow, tx pgx.Tx, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if tx != nil {
		_ = tx.Rollback(ctx)
	}
	if errors.Is(err, pglock.ErrLockLost) {
		return // another runner has it, or will once the lease expires
	}
	r.d.cfg.Logger.Warn("pglock: debounced run failed; it runs again after the retry delay",
		"job", c.JobKey, "scope", r.o.Scope, "attempt", c.Attempts, "retry_delay", r.o.RetryDelay, "error", err)
	msg := db.ErrorText(err)
	_, ferr := r.d.queries.FailDebounced(ctx, db.FailDebouncedParams{Scope: r.o.Scope, JobKey: c.JobKey, FencingToken: c.FencingToken,
		Error: msg, RetryMs: r.o.RetryDelay.Milliseconds()})
	if ferr != nil && !errors.Is(ferr, pgx.ErrNoRows) {
		r.d.cfg.Logger.Warn("pglock: could not record a debounced run's failure; it runs again once its lease expires",
			"job", c.JobKey, "scope", r.o.Scope, "error", ferr, "run_error", err)
	}
}
