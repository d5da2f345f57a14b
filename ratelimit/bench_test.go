package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/ratelimit"
)

// BenchmarkAllow: one decision, durable and unlogged, against the cheapest durable write a
// hand-made counter could do (one UPDATE of one row), in the same run.
func BenchmarkAllow(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE counters (key text PRIMARY KEY, n bigint NOT NULL); INSERT INTO counters VALUES ('k', 0)`); err != nil {
		b.Fatal(err)
	}
	durable, _ := ratelimit.New(d.Pool, nil)
	unlogged, _ := ratelimit.New(d.Pool, &ratelimit.Config{Unlogged: true})
	limit := ratelimit.Limit{Rate: 1000000, Per: time.Second, Burst: 1000000}
	allow := func(l *ratelimit.Limiter) func() error {
		return func() error { _, err := l.Allow(ctx, "k", limit); return err }
	}
	benchkit.Compare(b,
		benchkit.Case{Name: "raw-update", Run: func() error {
			_, err := d.Pool.Exec(ctx, `UPDATE counters SET n = n + 1 WHERE key = 'k'`)
			return err
		}},
		benchkit.Case{Name: "durable", Run: allow(durable)},
		benchkit.Case{Name: "unlogged", Run: allow(unlogged)},
	)
}
