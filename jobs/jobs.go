package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/observe"
)

// Outcome is what a delivery did.
type Outcome int

const (
	// OutcomeRan: this delivery claimed the key and ran fn.
	OutcomeRan Outcome = iota + 1
	// OutcomeAlreadyDone: an earlier delivery succeeded; fn did not run.
	OutcomeAlreadyDone
	// OutcomeInProgress: another delivery is running it; fn did not run.
	OutcomeInProgress
)

func (o Outcome) String() string {
	switch o {
	case OutcomeRan:
		return "ran"
	case OutcomeAlreadyDone:
		return "already done"
	case OutcomeInProgress:
		return "in progress"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what a delivery found or did.
type Result struct {
	Outcome Outcome
	// Attempts counts the claims of the key, this delivery's included when its Outcome is OutcomeRan.
	Attempts int
	// Token is the fencing token of the attempt that ran (this delivery's when its Outcome is OutcomeRan): larger
	// than every earlier attempt's. 0 when unknown.
	Token int64
	// StartedAt and FinishedAt are the attempt's, by the database's clock; zero when unknown
	// (FinishedAt of an attempt under way).
	StartedAt, FinishedAt time.Time
	// Saved is the result an OutcomeAlreadyDone attempt saved (see Do), as JSON; nil if none.
	Saved json.RawMessage
}

// Status is the state of a record.
type Status string

const (
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// Record is a key's record.
type Record struct {
	Scope, Key     string
	Status         Status
	Holder         string // the last attempt's holder id
	Instance       string // the last attempt's process, app@host:pid
	Attempts       int
	Token          int64
	LeaseExpiresAt time.Time // while a Run attempt runs; else zero
	StartedAt      time.Time
	FinishedAt     time.Time // zero while running
	LastError      string
	Saved          json.RawMessage
	Fingerprint    string
	RetainUntil    time.Time // the record is a duplicate's answer until then
	CreatedAt      time.Time // the first claim
}

// Deduper deduplicates deliveries for one process. It is safe for concurrent use, holds no
// connection between calls, and needs no closing.
type Deduper struct {
	events   *observe.Emitter // nil without an Observer
	pool     *pgxpool.Pool
	queries  *db.Queries
	cfg      Config
	instance string
	renewals *lease.Set // the leases of Run's attempts, renewed together
	// debounceRenewals renews the leases of debounced runs (RunDebounced).
	debounceRenewals *lease.Set

	superseding superseding // the Supersede attempts under way

	// The watches of the keys deliveries wait for, by lock key (the notification's payload);
	// the listener's subscription lives while there are any.
	mu             sync.Mutex
	watches        map[int64]*watch
	subscribeMu    sync.Mutex // orders subscribing and unsubscribing; the handlers never take it
	listeners      int
	unsubscribeAll func()
}

// New returns a Deduper that takes its connections from pool. A nil cfg means the defaults.
func New(pool *pgxpool.Pool, cfg *Config) (*Deduper, error) {
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
	d := &Deduper{
		events: observe.New(resolved.Observer, resolved.Logger),
		pool:   pool, queries: db.New(db.Translating(pool)), cfg: resolved, instance: instance,
		watches: map[int64]*watch{},
	}
	d.renewals = lease.NewSet(lease.SetConfig{Renew: d.renewMany, Ctx: context.Background()})
	d.debounceRenewals = lease.NewSet(lease.SetConfig{Renew: d.renewDebounced, Ctx: context.Background()})
	return d, nil
}

// Run delivers key: unless it succeeded before or runs elsewhere, it claims it and runs fn
// under a lease, then records the outcome. It is for effects outside this database (RunTx is
// for those in it). fn's context is canceled with cause [pglock.ErrLockLost] if the lease is
// lost; Run then returns an error matching [pglock.ErrLockLost] too, and if another delivery
// took the key over meanwhile, this attempt's outcome is not recorded. fn's error is returned
// (the record failed: the next delivery retries), as is an error matching [pglock.ErrGaveUp]
// or [pglock.ErrFingerprintMismatch] when nothing ran.
func (d *Deduper) Run(ctx context.Context, key string, opts *Options, fn func(ctx context.Context) error) (Result, error) {
	if fn == nil {
		return Result{}, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	}
	return d.run(ctx, key, opts, func(ctx context.Context) (json.RawMessage, error) { return nil, fn(ctx) })
}

// Do is Run for a function with a result: the result is saved, as JSON, with the outcome, and
// a duplicate delivery gets it back (decoded into T) with OutcomeAlreadyDone. A result that cannot be
// saved (JSON cannot encode it, or it holds the NUL character, which PostgreSQL cannot) is
// returned with an error matching [pglock.ErrInvalidArgument]; the job still counts as done, and
// duplicates get T's zero value.
func Do[T any](ctx context.Context, d *Deduper, key string, opts *Options, fn func(ctx context.Context) (T, error)) (T, Result, error) {
	var v T
	if fn == nil {
		return v, Result{}, errs.Errorf("%w: nil fn", pglock.ErrInvalidArgument)
	}
	var unsaved error
	res, err := d.run(ctx, key, opts, func(ctx context.Context) (json.RawMessage, error) {
		var err error
		if v, err = fn(ctx); err != nil {
			return nil, err
		}
		encoded, err := json.Marshal(v)
		if err == nil && ident.HoldsNUL(encoded) {
			err = errors.New("PostgreSQL's jsonb cannot hold the NUL character")
		}
		if err != nil {
			unsaved = errs.Errorf("%w: the result of %q was not saved: %w", pglock.ErrInvalidArgument, key, err)
			return nil, nil
		}
		return encoded, nil
	})
	if err == nil && res.Outcome == OutcomeAlreadyDone && res.Saved != nil {
		if err := json.Unmarshal(res.Saved, &v); err != nil {
			return v, res, errs.Errorf("decode the result saved for %q: %w", key, err)
		}
	}
	return v, res, errors.Join(err, unsaved)
}

// Status returns key's record in Config.Scope, or an error matching [pglock.ErrNotFound].
func (d *Deduper) Status(ctx context.Context, key string) (Record, error) {
	if err := checkKey(key); err != nil {
		return Record{}, err
	}
	row, err := d.queries.GetJob(ctx, db.GetJobParams{Scope: d.cfg.Scope, JobKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, errs.Errorf("%w: no record of job %.80q", pglock.ErrNotFound, key)
	}
	if err != nil {
		return Record{}, errs.Errorf("status of %.80q: %w", key, err)
	}
	return recordOf(row.PglockJob), nil
}

// Forget deletes key's record in Config.Scope, so that its next delivery runs it again (after
// waiting for a RunTx attempt under way to end); a Run attempt under way loses its lease. It
// returns an error matching [pglock.ErrNotFound] when there was no record.
func (d *Deduper) Forget(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	_, err := d.queries.ForgetJob(ctx, db.ForgetJobParams{Scope: d.cfg.Scope, JobKey: key})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errs.Errorf("%w: no record of job %.80q", pglock.ErrNotFound, key)
	case err != nil:
		return errs.Errorf("forget %.80q: %w", key, err)
	}
	return nil
}

// Collect deletes the records whose retention has ended, in every scope, a thousand per
// statement (each its own short transaction, skipping rows a claim holds), and returns how many
// it deleted.
func (d *Deduper) Collect(ctx context.Context) (int, error) {
	return Collect(ctx, d.pool)
}

// Collect is Deduper.Collect for a pool (as pglockctl gc calls it).
func Collect(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	q := db.New(db.Translating(pool))
	total := 0
	for {
		n, err := q.CollectJobs(ctx, collectSize)
		total += int(n)
		if err != nil {
			return total, errs.Errorf("collect: %w", err)
		}
		if n < collectSize {
			return total, nil
		}
	}
}

func recordOf(j db.PglockJob) Record {
	return Record{
		Scope: j.Scope, Key: j.JobKey, Status: Status(j.Status), Holder: j.HolderID, Instance: j.Instance,
		Attempts: int(j.Attempts), Token: j.FencingToken, LeaseExpiresAt: db.Deref(j.LeaseExpiresAt),
		StartedAt: j.StartedAt, FinishedAt: db.Deref(j.FinishedAt), LastError: db.Deref(j.LastError),
		Saved: json.RawMessage(j.Result), Fingerprint: db.Deref(j.Fingerprint), RetainUntil: j.RetainUntil,
		CreatedAt: j.CreatedAt,
	}
}
