package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/tablelock"
)

// errBusy is a try that found the name held: the answer a failed try must give.
var errBusy = errors.New("held by another")

// A locker is one instance's handle on a design's locks.
type locker interface {
	// try takes name if it is free, and errBusy if it is not.
	try(ctx context.Context, name string) (release func(context.Context) error, err error)
	// acquire waits for name, in the design's own way of waiting.
	acquire(ctx context.Context, name string) (release func(context.Context) error, err error)
	close()
}

// A design is one way of taking a named lock that the scenarios compare.
type design struct {
	name string
	note string // how it is set up and how it waits, for the report
	// open makes an instance's locker on a pool of its own (for PostgreSQL designs) or on the
	// instance's own client (for Redis).
	open func(ctx context.Context, env *env, pool *pgxpool.Pool) (locker, error)
	// oneWaiterPerHandle: a handle waits for one name at a time (a pinned session), so the
	// 1,000 waiters need one each.
	oneWaiterPerHandle bool
	// redisNodes: the Redis servers a design runs on (nil for PostgreSQL's); their counters are
	// its requests and connections.
	redisNodes func(e *env) []string
	// peer: a design that is not pglock's (another project's, or raw SQL written by hand). Its
	// failures are results, reported on the page; only pglock's own, and the harness's (setting
	// up databases, pools and counters), stop the run.
	peer bool
}

// errPeerFailed is what an operation returns when a peer failed it: the failure is recorded,
// and the operation measured no sample.
var errPeerFailed = errors.New("a peer failed; recorded")

// errHarness marks a failure of the benchmark's own (a database, a pool, the server's
// counters) in a scenario step that also runs a design: it stops the run, whoever's step.
var errHarness = errors.New("the benchmark itself failed")

func harness(err error) error { return fmt.Errorf("%w: %w", errHarness, err) }

// failedLocker stands for a peer's instance that could not be opened: every operation fails
// with why.
type failedLocker struct{ err error }

func (f failedLocker) try(context.Context, string) (func(context.Context) error, error) {
	return nil, f.err
}
func (f failedLocker) acquire(context.Context, string) (func(context.Context) error, error) {
	return nil, f.err
}
func (failedLocker) close() {}

// holderIDs are unique per acquisition in every design that takes a holder id, the seed's
// included (it used one per instance, which lets every goroutine of an instance in at once).
var holderIDs atomic.Int64

func nextHolder(prefix string) string { return fmt.Sprintf("%s-%d", prefix, holderIDs.Add(1)) }

// rawSQL is what a team writes by hand: a lease row upserted and deleted for a try; for a wait,
// the cheapest PostgreSQL offers, a blocking pg_advisory_lock on a pinned connection.
var rawSQL = design{
	name: "raw SQL",
	note: "try: the seed's lease upsert on `distributed_locks` (on `clock_timestamp()`, with a token) and a DELETE; wait: a blocking `pg_advisory_lock(hashtext(name))` on a pinned connection, unlocked after",
	open: func(ctx context.Context, _ *env, pool *pgxpool.Pool) (locker, error) {
		return rawLocker{pool}, nil
	},
	oneWaiterPerHandle: true,
	peer:               true,
}

type rawLocker struct{ pool *pgxpool.Pool }

func (r rawLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	holder := nextHolder("raw")
	tag, err := r.pool.Exec(ctx, benchkit.RawUpsertSQL, name, holder)
	if err != nil {
		return nil, err
	}
	if tag.RowsAffected() == 0 {
		return nil, errBusy
	}
	return func(ctx context.Context) error {
		_, err := r.pool.Exec(ctx, benchkit.RawDeleteSQL, name, holder)
		return err
	}, nil
}

func (r rawLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		conn.Release()
		return nil, err
	}
	return func(ctx context.Context) error {
		defer conn.Release()
		_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtext($1))", name)
		return err
	}, nil
}

func (rawLocker) close() {}

var tablelockDesign = design{
	name: "pglock tablelock",
	note: "a `tablelock.Locker` per instance, default settings (TTL 30 s, waiters queued in the database, woken by one LISTEN connection per Locker)",
	open: func(ctx context.Context, _ *env, pool *pgxpool.Pool) (locker, error) {
		l, err := tablelock.New(pool, &tablelock.Config{AppName: "bench"})
		if err != nil {
			return nil, err
		}
		return tablelockLocker{l}, nil
	},
}

type tablelockLocker struct{ l *tablelock.Locker }

func (t tablelockLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	lk, err := t.l.TryAcquire(ctx, name, nil)
	if err != nil {
		if errors.Is(err, pglock.ErrLocked) {
			return nil, errBusy
		}
		return nil, err
	}
	return lk.Release, nil
}

func (t tablelockLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	lk, err := t.l.Acquire(ctx, name, nil)
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

func (t tablelockLocker) close() { t.l.Close(context.Background()) }

var advisoryDesign = design{
	name: "pglock advisory",
	note: "an `advisory.Session` (a pinned, health-checked connection) per instance, `TryLock`/`Lock` and `Unlock` on a string key",
	open: func(ctx context.Context, _ *env, pool *pgxpool.Pool) (locker, error) {
		s, err := advisory.Open(ctx, pool, nil)
		if err != nil {
			return nil, err
		}
		return advisoryLocker{s}, nil
	},
	oneWaiterPerHandle: true,
}

type advisoryLocker struct{ s *advisory.Session }

func (a advisoryLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	key := advisory.StringKey(name)
	if err := a.s.TryLock(ctx, key); err != nil {
		if errors.Is(err, pglock.ErrLocked) {
			return nil, errBusy
		}
		return nil, err
	}
	return func(ctx context.Context) error { return a.s.Unlock(ctx, key) }, nil
}

func (a advisoryLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	key := advisory.StringKey(name)
	if err := a.s.Lock(ctx, key); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return a.s.Unlock(ctx, key) }, nil
}

func (a advisoryLocker) close() { a.s.Close(context.Background()) }

// poll retries try every interval until it takes name or ctx ends: how the seed design waits.
// A try that fails is retried as a busy one is, as a polling client would, and counted.
func poll(ctx context.Context, interval time.Duration, try func(context.Context, string) (func(context.Context) error, error), name string) (func(context.Context) error, error) {
	for {
		release, err := try(ctx, name)
		if err == nil {
			return release, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, errBusy) {
			pollFailures.record(err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(interval):
		}
	}
}

// pollFailures counts the polls that failed, and keeps the first error, for the report.
var pollFailures failures

type failures struct {
	mu    sync.Mutex
	n     int
	first error
}

func (f *failures) record(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.first = err
	}
	f.n++
}
