package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
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

// Cost is one limit's part of a decision: N events of Key under Limit. Key is 1 to 255 bytes of
// UTF-8 without NUL; the same key under two limits shares one budget, so give each limit its own
// keys.
type Cost struct {
	Key   string
	Limit Limit
	N     int // from 1 to Limit.Burst; 0 means 1
}

// MaxCosts is how many limits one decision may take at once.
const MaxCosts = 100

// Allow decides whether one event of key fits limit now, in one round trip, and counts it if
// it does.
func (l *Limiter) Allow(ctx context.Context, key string, limit Limit) (Result, error) {
	return l.AllowAll(ctx, Cost{Key: key, Limit: limit, N: 1})
}

// AllowN is Allow for n events at once (a weighted event: the tokens of a request, say), from
// 1 to limit.Burst.
func (l *Limiter) AllowN(ctx context.Context, key string, limit Limit, n int) (Result, error) {
	return l.AllowAll(ctx, Cost{Key: key, Limit: limit, N: n})
}

// AllowAll decides several limits at once, all or nothing, in one round trip: a per-key and a
// global limit, or a per-minute and a per-day one. Each key's cost is counted only if every
// key's fits now; RetryAfter is how long until they all would, Remaining the smallest of the
// keys' remainders. Keys are locked in key order, so that decisions sharing keys never deadlock.
func (l *Limiter) AllowAll(ctx context.Context, costs ...Cost) (Result, error) {
	r, err := l.take(ctx, costs, 0)
	if err != nil {
		l.observe(ctx, costs, 0, err)
		return Result{}, err
	}
	if !r.Allowed {
		l.observe(ctx, costs, 0, pglock.ErrRateLimited)
		return Result{Allowed: false, RetryAfter: time.Duration(r.WaitUs) * time.Microsecond, Remaining: int(r.Remaining)}, nil
	}
	l.observe(ctx, costs, 0, nil)
	return Result{Allowed: true, Remaining: int(r.Remaining)}, nil
}

// Wait takes one event of key under limit, waiting until it fits: in one round trip it reserves
// the next slot, then sleeps until it. A slot further away than ctx's deadline is not reserved:
// Wait then returns at once an error matching [pglock.ErrRateLimited] (a *LimitedError saying
// how long it would have waited). If ctx ends while Wait sleeps, the reserved slot goes unused.
func (l *Limiter) Wait(ctx context.Context, key string, limit Limit) error {
	return l.WaitAll(ctx, Cost{Key: key, Limit: limit, N: 1})
}

// WaitN is Wait for n events at once, from 1 to limit.Burst.
func (l *Limiter) WaitN(ctx context.Context, key string, limit Limit, n int) error {
	return l.WaitAll(ctx, Cost{Key: key, Limit: limit, N: n})
}

// WaitAll is Wait for several limits at once, all or nothing: every key's cost is reserved for
// the same moment, the first at which they all fit.
func (l *Limiter) WaitAll(ctx context.Context, costs ...Cost) (err error) {
	if l.events != nil {
		start := time.Now()
		defer func() { l.observe(ctx, costs, time.Since(start), err) }()
	}
	maxWait := time.Duration(math.MaxInt64)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = time.Until(deadline)
	}
	r, err := l.take(ctx, costs, max(0, maxWait.Microseconds()))
	if err != nil {
		return err
	}
	wait := time.Duration(r.WaitUs) * time.Microsecond
	if !r.Allowed {
		return &LimitedError{Key: keysOf(costs), RetryAfter: wait}
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
		return errs.Errorf("wait for rate limit of %q: %w", keysOf(costs), context.Cause(ctx))
	}
}

// Refund gives back n of the events a decision took for taken (its Cost), once the real cost
// turns out lower (the tokens an LLM's answer used, known after the call): they fit again now.
// n is from 1 to taken.N; a refund never leaves the key more than its burst. It returns how
// many events fit now. Refund each taken cost once: the database does not know what each
// caller took.
func (l *Limiter) Refund(ctx context.Context, taken Cost, n int) (remaining int, err error) {
	c, interval, err := checkCost(taken)
	if err != nil {
		return 0, err
	}
	if n < 1 || n > c.N {
		return 0, errs.Errorf("%w: a refund of %d, where %d were taken", pglock.ErrInvalidArgument, n, c.N)
	}
	r, err := l.queries.RefundRate(ctx, db.RefundRateParams{Durable: l.durable, RateKey: c.Key, IntervalUs: interval,
		Burst: int32(c.Limit.Burst), Cost: int32(n)})
	if err != nil {
		return 0, errs.Errorf("refund rate limit of %q: %w", c.Key, err)
	}
	return int(r), nil
}

// Peek says how many events of key fit limit now (Remaining), and whether one does (Allowed,
// else RetryAfter), taking none: a plain read.
func (l *Limiter) Peek(ctx context.Context, key string, limit Limit) (Result, error) {
	c, interval, err := checkCost(Cost{Key: key, Limit: limit})
	if err != nil {
		return Result{}, err
	}
	r, err := l.queries.PeekRate(ctx, db.PeekRateParams{Durable: l.durable, RateKey: c.Key, IntervalUs: interval, Burst: int32(limit.Burst)})
	if err != nil {
		return Result{}, errs.Errorf("peek at rate limit of %q: %w", key, err)
	}
	return Result{Allowed: r.WaitUs == 0, RetryAfter: time.Duration(r.WaitUs) * time.Microsecond, Remaining: int(r.Remaining)}, nil
}

// Reset forgets key: its next event finds it as a new one, with its whole burst.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := pglock.ValidateName(key); err != nil {
		return errs.Errorf("%w: key: %w", pglock.ErrInvalidArgument, err)
	}
	if _, err := l.queries.ResetRate(ctx, db.ResetRateParams{Durable: l.durable, RateKey: key}); err != nil {
		return errs.Errorf("reset rate limit of %q: %w", key, err)
	}
	return nil
}

// checkCost checks c and fills in its default, returning its limit's interval.
func checkCost(c Cost) (Cost, int64, error) {
	if err := pglock.ValidateName(c.Key); err != nil {
		return c, 0, errs.Errorf("%w: key: %w", pglock.ErrInvalidArgument, err)
	}
	interval, err := c.Limit.interval()
	if err != nil {
		return c, 0, err
	}
	if c.N == 0 {
		c.N = 1
	}
	if c.N < 1 || c.N > c.Limit.Burst {
		return c, 0, errs.Errorf("%w: a cost of %d events of %q, where its burst is %d", pglock.ErrInvalidArgument, c.N, c.Key, c.Limit.Burst)
	}
	return c, interval, nil
}

// take decides costs: one key in pglock_rate_take's single statement, several in
// pglock_rate_take_many's.
func (l *Limiter) take(ctx context.Context, costs []Cost, maxWaitUs int64) (db.TakeRateRow, error) {
	if len(costs) == 0 || len(costs) > MaxCosts {
		return db.TakeRateRow{}, errs.Errorf("%w: %d limits in one decision, from 1 to %d", pglock.ErrInvalidArgument, len(costs), MaxCosts)
	}
	p := db.TakeRatesParams{Durable: l.durable, Synchronous: l.synchronous, MaxWaitUs: maxWaitUs,
		RateKeys: make([]string, len(costs)), IntervalUs: make([]int64, len(costs)), Bursts: make([]int32, len(costs)),
		Costs: make([]int32, len(costs))}
	seen := make(map[string]bool, len(costs))
	for i, c := range costs {
		c, interval, err := checkCost(c)
		if err != nil {
			return db.TakeRateRow{}, err
		}
		if seen[c.Key] {
			return db.TakeRateRow{}, errs.Errorf("%w: key %q twice in one decision", pglock.ErrInvalidArgument, c.Key)
		}
		seen[c.Key] = true
		p.RateKeys[i], p.IntervalUs[i], p.Bursts[i], p.Costs[i] = c.Key, interval, int32(c.Limit.Burst), int32(c.N)
	}
	if len(costs) == 1 {
		r, err := l.queries.TakeRate(ctx, db.TakeRateParams{
			Durable: l.durable, RateKey: p.RateKeys[0], IntervalUs: p.IntervalUs[0], Burst: p.Bursts[0], Cost: p.Costs[0],
			MaxWaitUs: maxWaitUs, Synchronous: l.synchronous,
		})
		if err != nil {
			return db.TakeRateRow{}, errs.Errorf("rate limit of %q: %w", p.RateKeys[0], err)
		}
		return r, nil
	}
	r, err := l.queries.TakeRates(ctx, p)
	if err != nil {
		return db.TakeRateRow{}, errs.Errorf("rate limits of %q: %w", keysOf(costs), err)
	}
	return db.TakeRateRow(r), nil
}

// keysOf names the keys of a decision in its errors and events.
func keysOf(costs []Cost) string {
	keys := make([]string, len(costs))
	for i, c := range costs {
		keys[i] = c.Key
	}
	return strings.Join(keys, "+")
}

// observe reports a decision that waited wait and ended with err: nil when allowed, matching
// [pglock.ErrRateLimited] when denied.
func (l *Limiter) observe(ctx context.Context, costs []Cost, wait time.Duration, err error) {
	if l.events == nil {
		return
	}
	e := pglock.Event{Kind: pglock.EventRateLimit, Primitive: pglock.PrimitiveRateLimit, Name: l.name, Key: keysOf(costs),
		Outcome: pglock.OutcomeAllowed, Wait: wait, Err: err}
	switch {
	case errors.Is(err, pglock.ErrRateLimited):
		e.Outcome, e.Err = pglock.OutcomeDenied, nil
	case err != nil:
		e.Outcome = observe.AcquireOutcome(err)
	}
	if e.Outcome == pglock.OutcomeAllowed || e.Outcome == pglock.OutcomeDenied {
		for _, c := range costs {
			e.Count += int64(max(c.N, 1)) // each limit's events, weighted: those decided
		}
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
