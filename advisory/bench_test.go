package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
)

// BenchmarkWithXactLock: WithXactLock with an empty function against BEGIN,
// pg_advisory_xact_lock, COMMIT sent by hand. Goal: ratio ≤ 1.10.
func BenchmarkWithXactLock(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	key := advisory.StringKey("bench")
	id, _ := key.Int64()
	benchkit.Compare(b,
		benchkit.Case{Name: "raw-sql", Run: func() error {
			return pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", id)
				return err
			})
		}},
		benchkit.Case{Name: "with-xact-lock", Run: func() error {
			return advisory.WithXactLock(ctx, d.Pool, key, nil, func(context.Context, pgx.Tx) error { return nil })
		}},
	)
}

// BenchmarkHandoff: 4 sessions on separate pools hand one key around with blocking Lock, against
// raw pg_advisory_lock on 4 pinned connections, alternating, in the same run. Goal: throughput
// ≥ 0.9×.
func BenchmarkHandoff(b *testing.B) {
	const workers = 4
	d := testdb.New(b, nil)
	ctx := context.Background()
	pools := make([]*pgxpool.Pool, workers)
	for i := range pools {
		pools[i] = d.NewPool(b, nil)
	}
	total := max(b.N, 2000)
	key := advisory.StringKey("handoff")
	id, _ := key.Int64()
	b.ResetTimer()

	rawWorkers := benchkit.RawAdvisoryWorkers(b, pools, id)
	sessionWorkers := func(worker int) (func() (time.Duration, error), func()) {
		s, err := advisory.Open(ctx, pools[worker], &advisory.Config{HealthCheckInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		return func() (time.Duration, error) {
			start := time.Now()
			if err := s.Lock(ctx, key); err != nil {
				return 0, err
			}
			waited := time.Since(start)
			return waited, s.Unlock(ctx, key)
		}, func() { s.Close(ctx) }
	}
	// Twice each, alternating, so that drift of a shared machine falls on both alike.
	var raw, sessions benchkit.Contention
	for range 2 {
		raw = raw.Add(benchkit.Contend(workers, total/2, rawWorkers))
		sessions = sessions.Add(benchkit.Contend(workers, total/2, sessionWorkers))
	}
	raw.Report(b, "raw")
	sessions.Report(b, "session")
	b.ReportMetric(sessions.PerSecond/raw.PerSecond, "session/raw-throughput")
}
