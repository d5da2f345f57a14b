package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pglock/pglock/cron"
)

// The runtime-schedule scenario: n schedules of one kind, "@every 1m" with a tenant's
// arguments each, defined in the database and run by three instances (a pool and a Scheduler
// each): every tick once, what the instances cost the database between minute boundaries, and
// how late the runs start when all n are due at once.
var (
	scheduleCount   = flag.Int("schedules", 10000, "runtime schedules of one kind")
	scheduleMinutes = flag.Int("schedule-minutes", 3, "minute boundaries measured")
)

const scheduleInstances = 3

// scheduleResult is one minute boundary.
type scheduleResult struct {
	tick                  time.Time
	ran, schedules        int // runs of the tick, and the schedules they were of
	missed                int // ticks recorded missed in the minute
	p50, p99, max         time.Duration
	idleTxPerSec, idleCPU float64 // after the runs of the tick, until the next
}

// fireDelays are when the runs' functions started, after their ticks, by tick: on the host's
// clock, which is the database's here (the schedulers measure the offset: microseconds).
type fireDelays struct {
	mu     sync.Mutex
	byTick map[time.Time][]time.Duration
}

func (f *fireDelays) record(_ context.Context, run cron.Run) error {
	delay := time.Since(run.ScheduledTime)
	f.mu.Lock()
	f.byTick[run.ScheduledTime.UTC()] = append(f.byTick[run.ScheduledTime.UTC()], delay)
	f.mu.Unlock()
	return nil
}

// of returns the delays of tick's runs, sorted.
func (f *fireDelays) of(tick time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	list := slices.Clone(f.byTick[tick.UTC()])
	slices.Sort(list)
	return list
}

func runtimeSchedules(ctx context.Context, e *env, r *report, say func(string, ...any)) error {
	n := *scheduleCount
	delays := &fireDelays{byTick: map[time.Time][]time.Duration{}}
	for i := range scheduleInstances {
		pool, err := newPool(ctx, e.url, 10)
		if err != nil {
			return harness(err)
		}
		defer pool.Close()
		s, err := cron.New(pool, &cron.Config{AppName: fmt.Sprint("bench-", i)})
		if err != nil {
			return err
		}
		if err := s.Handle("tenant-report", delays.record); err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		defer s.Stop(context.Background())
		defer func() { say("  instance %d: %+v", i, s.Stats()) }()
	}
	// What the scenarios before left behind (dead rows of a hundred thousand leases) is
	// vacuumed now, not by autovacuum in the middle of a minute boundary.
	say("vacuuming what the scenarios before left")
	for _, stmt := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			return harness(err)
		}
	}
	say("defining %d schedules", n)
	if _, err := e.admin.Exec(ctx, `SELECT pglock_cron_define('tenant-' || i, 'tenant-report', '@every 1m', 'UTC',
			jsonb_build_object('tenant', i), 'skip', 'skip', 86400000, 604800000, 1000, 30000, 0, 0, NULL, NULL, NULL, NULL,
			false, 'bench', 'a schedule per tenant')
		  FROM generate_series(1, $1) AS i`, n); err != nil {
		return err
	}
	var results []scheduleResult
	for range *scheduleMinutes {
		res, err := measureMinute(ctx, e, n, delays, say)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	if _, err := e.admin.Exec(ctx, `DELETE FROM pglock_cron_schedules WHERE kind = 'tenant-report'`); err != nil {
		return err
	}
	r.schedulesTable(n, results)
	return nil
}

// measureMinute waits for the next minute boundary, reads how the runs of its tick started once
// all have, and then measures the database's load until shortly before the next.
func measureMinute(ctx context.Context, e *env, n int, delays *fireDelays, say func(string, ...any)) (scheduleResult, error) {
	var now time.Time
	if err := e.admin.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return scheduleResult{}, harness(err)
	}
	offset := time.Until(now) // the database's clock minus the host's
	res := scheduleResult{tick: now.Truncate(time.Minute).Add(time.Minute)}
	say("tick %s: waiting for its %d runs", res.tick.Format(time.TimeOnly), n)
	for deadline := res.tick.Add(45 * time.Second); time.Now().Add(offset).Before(deadline); {
		if err := sleepCtx(ctx, time.Second); err != nil {
			return res, err
		}
		var done int
		if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM pglock_cron_runs WHERE scheduled_time = $1
			AND status IN ('ran', 'failed', 'abandoned', 'canceled')`, res.tick).Scan(&done); err != nil {
			return res, harness(err)
		}
		if done >= n {
			break
		}
	}
	if err := e.admin.QueryRow(ctx, `SELECT count(*), count(DISTINCT schedule),
			(SELECT count(*) FROM pglock_cron_runs WHERE status = 'missed' AND scheduled_time > $1::timestamptz - interval '1 minute')
		  FROM pglock_cron_runs WHERE scheduled_time = $1 AND kind = 'scheduled' AND started_at IS NOT NULL`, res.tick).
		Scan(&res.ran, &res.schedules, &res.missed); err != nil {
		return res, harness(err)
	}
	if d := delays.of(res.tick); len(d) > 0 {
		res.p50, res.p99, res.max = d[len(d)/2], d[len(d)*99/100], d[len(d)-1]
	}
	say("  %d runs of %d schedules, %d missed; fire delay p50 %s, p99 %s, max %s", res.ran, res.schedules, res.missed,
		res.p50.Round(time.Millisecond), res.p99.Round(time.Millisecond), res.max.Round(time.Millisecond))

	// The idle window: from when the runs' counts have reached the statistics to shortly
	// before the next boundary.
	if err := statsSettle(ctx); err != nil {
		return res, err
	}
	windowEnd := res.tick.Add(57 * time.Second)
	txBefore, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	cpuBefore, began := postgresCPU(), time.Now()
	if err := sleepCtx(ctx, windowEnd.Sub(time.Now().Add(offset))); err != nil {
		return res, err
	}
	txAfter, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	elapsed := time.Since(began).Seconds()
	res.idleTxPerSec, res.idleCPU = float64(txAfter-txBefore)/elapsed, (postgresCPU()-cpuBefore).Seconds()/elapsed
	say("  idle: %.1f transactions/s, PostgreSQL %.2f cores over %.0f s", res.idleTxPerSec, res.idleCPU, elapsed)
	return res, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *report) schedulesTable(n int, results []scheduleResult) {
	var rows [][]string
	for _, s := range results {
		once := "yes"
		if s.ran != n || s.schedules != n || s.missed != 0 {
			once = fmt.Sprintf("no: %d runs of %d schedules, %d missed", s.ran, s.schedules, s.missed)
		}
		rows = append(rows, []string{s.tick.UTC().Format(time.TimeOnly), fmt.Sprint(s.ran), once, ms(s.p50), ms(s.p99), ms(s.max),
			fmt.Sprintf("%.1f", s.idleTxPerSec), fmt.Sprintf("%.2f", s.idleCPU)})
	}
	r.add("Runtime schedules across three instances",
		fmt.Sprintf("%d schedules of one kind, each `@every 1m` with a tenant's arguments, defined in the database (`pglock_cron_define`) and run by %d instances (a pool and a `cron.Scheduler` each, `Handle`-ing the kind, default poll interval), all due at each minute boundary. *Each once*: every schedule's tick ran, once, and none was recorded missed. *Fire delay*: when a run's function started minus its tick (the host's clock, which is the database's here: the schedulers measure microseconds between them), over the tick's runs. *Idle*: the database's transactions per second and PostgreSQL's cores from when the tick's runs are done until shortly before the next boundary, while nothing is due.", n, scheduleInstances),
		mdTable([]string{"tick", "runs", "each once", "fire delay p50", "p99", "max", "idle transactions/s", "idle PostgreSQL cores"}, rows))
}
