package jobs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

func benchDeduper(b *testing.B, pool *pgxpool.Pool) *jobs.Deduper {
	b.Helper()
	d, err := jobs.New(pool, &jobs.Config{AppName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkRunTx: 4 workers on separate pools, each delivering distinct keys through RunTx
// whose fn does one INSERT, against what a team writes by hand to drop duplicates, an inbox
// table (BEGIN, INSERT INTO inbox ... ON CONFLICT DO NOTHING RETURNING, the INSERT, COMMIT), in
// alternating halves of one run. Goal: throughput ratio ≥ 0.9 (make bench measures it too,
// with 16 workers and the WAL written).
func BenchmarkRunTx(b *testing.B) {
	const workers = 4
	d := testdb.New(b, nil)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE effects (key text NOT NULL); CREATE TABLE inbox (key text PRIMARY KEY)`); err != nil {
		b.Fatal(err)
	}
	pools := make([]*pgxpool.Pool, workers)
	for i := range pools {
		pools[i] = d.NewPool(b, nil)
	}
	half := max(b.N, 2000) / 2
	b.ResetTimer()

	keys := 0
	effect := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
		return err
	}
	deliveries := func(deliver func(worker int, key string) error) func(worker int) (func() (time.Duration, error), func()) {
		return func(worker int) (func() (time.Duration, error), func()) {
			n := 0
			keys++
			prefix := fmt.Sprintf("w%d-%d-", worker, keys)
			return func() (time.Duration, error) {
				n++
				return 0, deliver(worker, prefix+fmt.Sprint(n))
			}, func() {}
		}
	}
	runTx := deliveries(func(worker int, key string) error {
		_, err := benchDeduper(b, pools[worker]).RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error {
			return effect(ctx, tx, key)
		})
		return err
	})
	inbox := deliveries(func(worker int, key string) error {
		return pgx.BeginFunc(ctx, pools[worker], func(tx pgx.Tx) error {
			var first string
			if err := tx.QueryRow(ctx, `INSERT INTO inbox (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING key`, key).Scan(&first); err != nil {
				return err
			}
			return effect(ctx, tx, key)
		})
	})
	var jobsRun, inboxRun benchkit.Contention
	for range 2 {
		jobsRun = jobsRun.Add(benchkit.Contend(workers, half, runTx))
		inboxRun = inboxRun.Add(benchkit.Contend(workers, half, inbox))
	}
	for _, c := range []benchkit.Contention{jobsRun, inboxRun} {
		if c.Err != nil {
			b.Fatal(c.Err)
		}
	}
	b.ReportMetric(jobsRun.PerSecond, "runtx-per-s")
	b.ReportMetric(inboxRun.PerSecond, "inbox-tx-per-s")
	b.ReportMetric(jobsRun.PerSecond/inboxRun.PerSecond, "runtx/inbox-throughput")
}

// BenchmarkDuplicateOfDoneKey: a delivery of a key that succeeded, against a primary-key read
// of its record, the floor. Goal: ratio ≤ 1.2.
func BenchmarkDuplicateOfDoneKey(b *testing.B) {
	d := testdb.New(b, nil)
	dd := benchDeduper(b, d.Pool)
	ctx := context.Background()
	if _, err := dd.Run(ctx, "done", nil, func(context.Context) error { return nil }); err != nil {
		b.Fatal(err)
	}
	benchkit.Compare(b,
		benchkit.Case{Name: "pk-read", Run: func() error {
			_, err := d.Pool.Exec(ctx, `SELECT status, result FROM pglock_jobs WHERE scope = $1 AND job_key = $2`, "", "done")
			return err
		}},
		benchkit.Case{Name: "jobs", Run: func() error {
			res, err := dd.Run(ctx, "done", nil, func(context.Context) error { return fmt.Errorf("ran") })
			if err == nil && res.Outcome != jobs.OutcomeAlreadyDone {
				err = fmt.Errorf("outcome %v", res.Outcome)
			}
			return err
		}},
	)
}

// BenchmarkRun: Run with an empty fn on a new key (a durable claim, then a durable outcome),
// against a raw durable INSERT and UPDATE of a row like it. Goal: ratio ≤ 1.1.
func BenchmarkRun(b *testing.B) {
	d := testdb.New(b, nil)
	dd := benchDeduper(b, d.Pool)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE raw_jobs (key text PRIMARY KEY, status text NOT NULL,
		started_at timestamptz NOT NULL, finished_at timestamptz)`); err != nil {
		b.Fatal(err)
	}
	n := 0
	benchkit.Compare(b,
		benchkit.Case{Name: "raw-insert-update", Run: func() error {
			n++
			key := fmt.Sprint("raw-", n)
			if _, err := d.Pool.Exec(ctx, `INSERT INTO raw_jobs VALUES ($1, 'running', clock_timestamp())`, key); err != nil {
				return err
			}
			_, err := d.Pool.Exec(ctx, `UPDATE raw_jobs SET status = 'succeeded', finished_at = clock_timestamp() WHERE key = $1`, key)
			return err
		}},
		benchkit.Case{Name: "jobs", Run: func() error {
			_, err := dd.Run(ctx, fmt.Sprint("job-", n), nil, func(context.Context) error { return nil })
			return err
		}},
	)
}

// BenchmarkRunTxBatch: 4 workers on separate pools deliver distinct keys through RunTxBatch, 50
// keys a batch whose fn inserts a row per key claimed, against RunTx delivering them one by one,
// in alternating halves of one run. Goal: deliveries per second ≥ 3× RunTx's.
func BenchmarkRunTxBatch(b *testing.B) {
	const workers, batch = 4, 50
	d := testdb.New(b, nil)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE effects (key text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	dedupers := make([]*jobs.Deduper, workers)
	for i := range dedupers {
		dedupers[i] = benchDeduper(b, d.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 1 })) // the session warmed below
	}
	half := max(b.N, 2000) / 2

	rounds := 0
	// deliveries makes workers whose step delivers size distinct keys.
	deliveries := func(size int, deliver func(worker int, keys []string) error) func(worker int) (func() (time.Duration, error), func()) {
		return func(worker int) (func() (time.Duration, error), func()) {
			rounds++
			prefix, n := fmt.Sprintf("w%d-%d-", worker, rounds), 0
			return func() (time.Duration, error) {
				keys := make([]string, size)
				for i := range keys {
					n++
					keys[i] = prefix + fmt.Sprint(n)
				}
				return 0, deliver(worker, keys)
			}, func() {}
		}
	}
	effect := func(ctx context.Context, tx pgx.Tx, keys []string) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) SELECT unnest($1::text[])`, keys)
		return err
	}
	runTx := deliveries(1, func(worker int, keys []string) error {
		_, err := dedupers[worker].RunTx(ctx, keys[0], nil, func(ctx context.Context, tx pgx.Tx) error { return effect(ctx, tx, keys) })
		return err
	})
	runTxBatch := deliveries(batch, func(worker int, keys []string) error {
		delivered, err := dedupers[worker].RunTxBatch(ctx, keys, nil, effect)
		if err == nil && delivered[batch-1].Outcome != jobs.OutcomeRan {
			err = fmt.Errorf("outcome %v", delivered[batch-1].Outcome)
		}
		return err
	})
	// A session's first batch costs a hundred milliseconds (PL/pgSQL compiles the functions it
	// calls): each worker's session makes its first of each before the clock starts.
	for _, warm := range []func(worker int) (func() (time.Duration, error), func()){runTx, runTxBatch} {
		if c := benchkit.Contend(workers, workers, warm); c.Err != nil {
			b.Fatal(c.Err)
		}
	}
	b.ResetTimer()
	var single, batched benchkit.Contention
	for range 2 {
		single = single.Add(benchkit.Contend(workers, half, runTx))
		batched = batched.Add(benchkit.Contend(workers, max(half/batch, workers), runTxBatch))
	}
	for _, c := range []benchkit.Contention{single, batched} {
		if c.Err != nil {
			b.Fatal(c.Err)
		}
	}
	b.ReportMetric(single.PerSecond, "runtx-deliveries-per-s")
	b.ReportMetric(batched.PerSecond*batch, "batch-deliveries-per-s")
	b.ReportMetric(batched.PerSecond*batch/single.PerSecond, "batch/runtx-throughput")
}
