package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/ratelimit"
)

// BenchmarkAllow: one decision in each mode (logged, the default; logged with synchronous
// commit; unlogged), against SELECT 1 on the same pool (goal: logged ≤ 2×) and against the
// cheapest durable write a hand-made counter could do (one UPDATE of one row), in one run.
func BenchmarkAllow(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE counters (key text PRIMARY KEY, n bigint NOT NULL); INSERT INTO counters VALUES ('k', 0)`); err != nil {
		b.Fatal(err)
	}
	logged, _ := ratelimit.New(d.Pool, nil)
	synchronous, _ := ratelimit.New(d.Pool, &ratelimit.Config{SynchronousCommit: true})
	unlogged, _ := ratelimit.New(d.Pool, &ratelimit.Config{Unlogged: true})
	limit := ratelimit.Limit{Rate: 1000000, Per: time.Second, Burst: 1000000}
	allow := func(l *ratelimit.Limiter) func() error {
		return func() error { _, err := l.Allow(ctx, "k", limit); return err }
	}
	benchkit.Compare(b,
		benchkit.Case{Name: "select-1", Run: func() error {
			_, err := d.Pool.Exec(ctx, `SELECT 1`)
			return err
		}},
		benchkit.Case{Name: "raw-update", Run: func() error {
			_, err := d.Pool.Exec(ctx, `UPDATE counters SET n = n + 1 WHERE key = 'k'`)
			return err
		}},
		benchkit.Case{Name: "logged", Run: allow(logged)},
		benchkit.Case{Name: "synchronous", Run: allow(synchronous)},
		benchkit.Case{Name: "unlogged", Run: allow(unlogged)},
	)
}

// BenchmarkAllowAll: a combined decision (a per-key and a global limit, all or nothing) against
// a single-key decision, in one run. Goal: ≤ 1.5×.
func BenchmarkAllowAll(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	l, _ := ratelimit.New(d.Pool, nil)
	limit := ratelimit.Limit{Rate: 1000000, Per: time.Second, Burst: 1000000}
	benchkit.Compare(b,
		benchkit.Case{Name: "single", Run: func() error {
			_, err := l.Allow(ctx, "tenant-1", limit)
			return err
		}},
		benchkit.Case{Name: "combined", Run: func() error {
			_, err := l.AllowAll(ctx, ratelimit.Cost{Key: "tenant-2", Limit: limit}, ratelimit.Cost{Key: "global", Limit: limit})
			return err
		}},
	)
}
