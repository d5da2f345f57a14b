package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/observe"
)

// Limit is a rate: at most Rate events per Per, of which up to Burst at once.
type Limit struct {
	Rate  int           // at least 1
	Per   time.Duration // positive; Per/Rate, the interval between events, at least 1 µs
	Burst int           // at least 1
}

// interval is the time one event uses up, in whole microseconds, rounded up: the limit is
// never exceeded, at the cost of a rate at most 1 µs per event below it.
func (l Limit) interval() (int64, error) {
	switch {
	case l.Rate < 1:
		return 0, errs.Errorf("%w: Limit.Rate %d is not positive", pglock.ErrInvalidArgument, l.Rate)
	case l.Per <= 0:
		return 0, errs.Errorf("%w: Limit.Per %s is not positive", pglock.ErrInvalidArgument, l.Per)
	case l.Burst < 1 || l.Burst > math.MaxInt32:
		return 0, errs.Errorf("%w: Limit.Burst %d must be from 1 to %d", pglock.ErrInvalidArgument, l.Burst, math.MaxInt32)
	}
	us := (l.Per.Microseconds() + int64(l.Rate) - 1) / int64(l.Rate)
	if l.Per.Microseconds() < int64(l.Rate) {
		return 0, errs.Errorf("%w: Limit of %d per %s: events closer than 1 µs", pglock.ErrInvalidArgument, l.Rate, l.Per)
	}
	return us, nil
}

// Config configures a Limiter. A nil *Config means the defaults: limits in a logged table,
// each decision committed without waiting for the WAL flush, so that a PostgreSQL crash can
// forget only the last few hundred milliseconds of decisions.
type Config struct {
	// Unlogged keeps the limits in an unlogged table: no WAL at all, and a PostgreSQL crash (or
	// a failover to a replica) resets every limit, as if each key were new. Default: false.
	Unlogged bool

	// SynchronousCommit makes each decision wait for the WAL flush (and synchronous replicas),
	// as PostgreSQL's synchronous_commit setting has it: no decision is forgotten in a crash.
	// Ignored with Unlogged. Default: false.
	SynchronousCommit bool

	// Name names the Limiter in its events: a name declared in code, such as "api-per-tenant",
	// unlike the keys. Default: "".
	Name string

	// Observer, when set, is told of every decision (pglock.Event, Primitive ratelimit: Key
	// is the key, Wait what Wait slept), without ever holding one up. Default: none.
	Observer pglock.Observer
}

// Limiter decides rate limits for one process. It is safe for concurrent use and holds no
// connection between calls.
type Limiter struct {
	events      *observe.Emitter // nil without an Observer
	name        string
	queries     *db.Queries
	durable     bool
	synchronous bool
}

// New returns a Limiter that takes its connections from pool. A nil cfg means the defaults.
func New(pool *pgxpool.Pool, cfg *Config) (*Limiter, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	return &Limiter{
		events: observe.New(c.Observer, slog.Default()), name: c.Name,
		queries: db.New(db.Translating(pool)), durable: !c.Unlogged, synchronous: c.SynchronousCommit,
	}, nil
}

// Result is a decision.
type Result struct {
	Allowed bool
	// RetryAfter is, for an event not allowed, how long until it would be.
	RetryAfter time.Duration
	// Remaining is how many more events would be allowed now.
	Remaining int
}

// Allow decides whether one event of key fits limit now, in one round trip, and counts it if
// it does. key is 1 to 255 bytes of UTF-8 without NUL; the same key under two limits shares
// one budget, so give each limit its own keys.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	r, err := l.take(ctx, key, limit, 0)
	if err != nil {
		l.observe(ctx, key, 0, err)
		return Result{}, err
	}
	if !r.Allowed {
		l.observe(ctx, key, 0, pglock.ErrRateLimited)
	} else {
		l.observe(ctx, key, 0, nil)
	}
	if !r.Allowed {
		return Result{Allowed: false, RetryAfter: time.Duration(r.WaitUs) * time.Microsecond, Remaining: int(r.Remaining)}, nil
	}
	return Result{Allowed: true, Remaining: int(r.Remaining)}, nil
}

// Wait takes one event of key under limit, waiting until it fits: in one round trip it reserves
// the next slot, then sleeps until it. A slot further away than ctx's deadline is not reserved:
// Wait then returns at once an error matching [pglock.ErrRateLimited] (a *LimitedError saying
// how long it would have waited). If ctx ends while Wait sleeps, the reserved slot goes unused.
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) (err error) {
	if l.events != nil {
		start := time.Now()
		defer func() { l.observe(ctx, key, time.Since(start), err) }()
	}
	maxWait := time.Duration(math.MaxInt64)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = time.Until(deadline)
	}
	r, err := l.take(ctx, key, limit, max(0, maxWait.Microseconds()))
	if err != nil {
		return err
	}
	wait := time.Duration(r.WaitUs) * time.Microsecond
	if !r.Allowed {
		return &LimitedError{Key: key, RetryAfter: wait}
	}
	if wait == 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return errs.Errorf("wait for rate limit of %q: %w", key, context.Cause(ctx))
	}
}

func (l *Limiter) take(ctx context.Context, key string, limit Limit, maxWaitUs int64) (db.TakeRateRow, error) {
	if err := pglock.ValidateName(key); err != nil {
		return db.TakeRateRow{}, errs.Errorf("%w: key: %w", pglock.ErrInvalidArgument, err)
	}
	interval, err := limit.interval()
	if err != nil {
		return db.TakeRateRow{}, err
	}
	r, err := l.queries.TakeRate(ctx, db.TakeRateParams{
		Durable: l.durable, RateKey: key, IntervalUs: interval, Burst: int32(limit.Burst), Cost: 1, MaxWaitUs: maxWaitUs,
		Synchronous: l.synchronous,
	})
	if err != nil {
		return db.TakeRateRow{}, errs.Errorf("rate limit of %q: %w", key, err)
	}
	return r, nil
}

// observe reports a decision that waited wait and ended with err: nil when allowed, matching
// [pglock.ErrRateLimited] when denied.
func (l *Limiter) observe(ctx context.Context, key string, wait time.Duration, err error) {
	if l.events == nil {
		return
	}
	e := pglock.Event{Kind: pglock.EventRateLimit, Primitive: pglock.PrimitiveRateLimit, Name: l.name, Key: key,
		Outcome: pglock.OutcomeAllowed, Wait: wait, Err: err}
	switch {
	case errors.Is(err, pglock.ErrRateLimited):
		e.Outcome, e.Err = pglock.OutcomeDenied, nil
	case err != nil:
		e.Outcome = observe.AcquireOutcome(err)
	}
	l.events.Emit(ctx, e)
}

// LimitedError is Wait's error for an event that would not fit before its deadline.
type LimitedError struct {
	Key        string
	RetryAfter time.Duration // how long until it would fit
}

func (e *LimitedError) Error() string {
	return fmt.Sprintf("%v: %q fits again in %s, past the deadline", pglock.ErrRateLimited, e.Key, e.RetryAfter)
}

// Unwrap makes a LimitedError match [pglock.ErrRateLimited].
func (e *LimitedError) Unwrap() error { return pglock.ErrRateLimited }
