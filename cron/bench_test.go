package cron_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
)

// delays collects, for each (schedule, tick) started, how late it started; a tick started twice
// is counted.
type delays struct {
	mu      sync.Mutex
	samples []time.Duration
	starts  map[string]int
}

func newDelays() *delays { return &delays{starts: map[string]int{}} }

func (d *delays) add(name string, tick time.Time, late time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.samples = append(d.samples, late)
	d.starts[name+"@"+tick.UTC().Format(time.RFC3339)]++
}

// check fails b unless every one of the expected starts happened exactly once.
func (d *delays) check(b *testing.B, what string, expected int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, n := range d.starts {
		if n != 1 {
			b.Fatalf("%s: %s started %d times", what, key, n)
		}
	}
	if len(d.starts) < expected {
		b.Fatalf("%s: %d starts, expected at least %d", what, len(d.starts), expected)
	}
}

// rawTicker is the floor a scheduler builds on: an instance that sleeps until each whole
// second by its own clock (the database's host's, here) and claims the tick of every name with
// one INSERT … ON CONFLICT DO NOTHING; the names it wins start.
func rawTicker(ctx context.Context, b *testing.B, pool *pgxpool.Pool, names []string, every time.Duration, d *delays) {
	for {
		now := time.Now()
		tick := now.Truncate(every).Add(every)
		select {
		case <-ctx.Done():
			return
		case <-time.After(tick.Sub(now)):
		}
		rows, err := pool.Query(ctx, `INSERT INTO raw_ticks (name, tick) SELECT unnest($1::text[]), $2
			ON CONFLICT DO NOTHING RETURNING name`, names, tick)
		if err != nil {
			if ctx.Err() == nil {
				b.Errorf("raw claim: %v", err)
			}
			return
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				b.Errorf("raw claim: %v", err)
			}
			go func() { d.add(name, tick, time.Since(tick)) }()
		}
		rows.Close()
	}
}

// tickDelays runs schedules (each `@every <every>`) on instances separate pools, with the raw
// ticker on as many other pools in the same seconds, for rounds ticks, and reports both delay
// distributions.
func tickDelays(b *testing.B, instances, schedules, rounds int, every time.Duration) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE raw_ticks (name text, tick timestamptz, PRIMARY KEY (name, tick))`); err != nil {
		b.Fatal(err)
	}
	names := make([]string, schedules)
	for i := range names {
		names[i] = fmt.Sprintf("s%04d", i)
	}
	pglock, raw := newDelays(), newDelays()
	var schedulers []*cron.Scheduler
	for range instances {
		pool := d.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 8 })
		s, err := cron.New(pool, &cron.Config{AppName: "cron-bench"})
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range names {
			err := s.Add(name, fmt.Sprintf("@every %s", every), nil, func(ctx context.Context, run cron.Run) error {
				// The host's clock plus the offset the scheduler measured: database time.
				pglock.add(run.Schedule, run.ScheduledTime, time.Now().Add(s.Stats().ClockOffset).Sub(run.ScheduledTime))
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		schedulers = append(schedulers, s)
	}
	rawCtx, stopRaw := context.WithCancel(ctx)
	var rawDone sync.WaitGroup
	for range instances {
		pool := d.NewPool(b, func(c *pgxpool.Config) { c.MaxConns = 8 })
		rawDone.Add(1)
		go func() { defer rawDone.Done(); rawTicker(rawCtx, b, pool, names, every, raw) }()
	}
	b.ResetTimer()
	for _, s := range schedulers {
		if err := s.Start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Duration(rounds)*every + every/2)
	stopRaw()
	rawDone.Wait()
	for _, s := range schedulers {
		if err := s.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	pglock.check(b, "cron", (rounds-1)*schedules)
	raw.check(b, "raw", (rounds-1)*schedules)
	benchkit.Percentiles(b, "cron", pglock.samples)
	benchkit.Percentiles(b, "raw", raw.samples)
}

// BenchmarkTickDelay: one @every 1s schedule on 5 instances (separate pools), 60 ticks: how late
// (database time) fn starts after its tick, each tick exactly once. In the same seconds, the
// floor: 5 raw tickers that sleep to the second and claim it with one INSERT. Goal: p99 ≤ 25 ms.
func BenchmarkTickDelay(b *testing.B) { tickDelays(b, 5, 1, 60, time.Second) }

// BenchmarkThousandSchedules: 1,000 schedules due in the same second (@every 5s) on 3
// instances, 6 rounds: each runs exactly once; the raw floor claims all 1,000 with one INSERT
// per instance. Goal: p99 ≤ 500 ms.
func BenchmarkThousandSchedules(b *testing.B) { tickDelays(b, 3, 1000, 6, 5*time.Second) }
