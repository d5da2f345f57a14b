package cron_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

// A claim never waits for a run's row while it holds a schedule another claim may hold: here B
// holds the schedule (as a claim's loop does) and then cancels its running runs (its replace
// step), while A's claim meets the same run, whose lease has expired. Neither deadlocks.
func TestClaimsDoNotDeadlockOverAnExpiredRun(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	register(t, d.Pool, "s", "0 0 1 1 *", &cron.Options{Overlap: cron.OverlapReplace})
	_, err := d.Pool.Exec(ctx, `INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, instance,
		fencing_token, lease_expires_at, created_at, started_at)
		VALUES ('s', now() - interval '1 hour', 'scheduled', 'running', 1, 'dead', 1, clock_timestamp() + interval '300 milliseconds', now(), now());
		INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
		VALUES ('s', now(), 'manual', 'pending', 1, now())`)
	require.NoError(t, err)
	b, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer b.Rollback(ctx)
	_, err = b.Exec(ctx, `SELECT FROM pglock_cron_schedules WHERE name = 's' FOR NO KEY UPDATE`)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond) // the run's lease expires
	claimed := make(chan error, 1)
	go func() {
		_, err := d.Pool.Exec(ctx, `SELECT * FROM pglock_cron_claim('a', ARRAY['s']::varchar[], ARRAY[now()]::timestamptz[],
			ARRAY[now()]::timestamptz[], ARRAY[30000]::bigint[], '{}', '{}', '{}', '{}', '{}')`)
		claimed <- err
	}()
	testdb.WaitFor(t, func() bool {
		var waiting bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%pglock_cron_claim%')`).Scan(&waiting))
		return waiting
	}, "the claim to wait for the schedule")
	_, err = b.Exec(ctx, `UPDATE pglock_cron_runs SET status = 'canceled' WHERE schedule = 's' AND status = 'running'`)
	require.NoError(t, err)
	require.NoError(t, b.Commit(ctx))
	require.NoError(t, testdb.Receive(t, claimed))
}

// Backfill leaves ticks after the watermark to the schedule's instances, which run or record
// each once: a backfill never runs a tick the scheduler also runs.
func TestBackfillLeavesTicksNotYetAccountedForToTheScheduler(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	y := time.Now().UTC().Year()
	year := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
	opts := &cron.Options{CatchUp: cron.CatchUpAll, CatchUpWindow: time.Since(year(y-1)) + time.Hour}
	register(t, d.Pool, "yearly", "0 0 1 1 *", opts)
	setWatermark(t, d.Pool, "yearly", year(y-1).Add(-time.Hour))
	n, err := cron.Backfill(ctx, d.Pool, "yearly", year(y-1), year(y), "bob")
	require.NoError(t, err)
	require.Zero(t, n, "both ticks are after the watermark")

	l := newLedger()
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("yearly", "0 0 1 1 *", opts, l.fn)) })
	require.Equal(t, year(y-1), l.next(t, "yearly").ScheduledTime.UTC())
	require.Equal(t, year(y), l.next(t, "yearly").ScheduledTime.UTC())
	testdb.WaitFor(t, func() bool { return statuses(history(t, d.Pool, "yearly"))[cron.StatusRan] == 2 }, "both recorded")
	require.Len(t, history(t, d.Pool, "yearly"), 2, "each tick once")
	n, err = cron.Backfill(ctx, d.Pool, "yearly", year(y-1), year(y), "bob")
	require.NoError(t, err)
	require.Zero(t, n, "both ran")
}

// Under CatchUpAll, the tick that is on time when an instance catches up waits behind the
// missed ones: every tick runs in tick order.
func TestCatchUpAllRunsEveryTickInOrder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	opts := &cron.Options{CatchUp: cron.CatchUpAll}
	register(t, d.Pool, "minutely", "* * * * *", opts)
	latest := time.Now().UTC().Truncate(time.Minute)
	setWatermark(t, d.Pool, "minutely", latest.Add(-3*time.Minute))
	l := newLedger()
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("minutely", "* * * * *", opts, l.fn)) })
	var prev time.Time
	for i := range 3 {
		run := l.next(t, "minutely")
		require.True(t, run.ScheduledTime.After(prev), "run %d (%s, %s) after %s", i, run.ScheduledTime, run.Kind, prev)
		prev = run.ScheduledTime
	}
}

// Retention counts from when a record was written or finished, not from its tick: a
// backfilled run of a tick older than the retention is kept.
func TestRetentionKeepsARecentRunOfAnOldTick(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLedger()
	start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("hourly", "0 * * * *", &cron.Options{Retention: 24 * time.Hour}, l.fn))
	})
	old := time.Now().UTC().Truncate(time.Hour).Add(-10 * 24 * time.Hour)
	n, err := cron.Backfill(ctx, d.Pool, "hourly", old, old, "bob")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	l.next(t, "hourly")
	testdb.WaitFor(t, func() bool { return statuses(history(t, d.Pool, "hourly"))[cron.StatusRan] == 1 }, "the backfilled run recorded")
	_, err = cron.Collect(ctx, d.Pool)
	require.NoError(t, err)
	require.Len(t, history(t, d.Pool, "hourly"), 1)
}

// A schedule the database refuses to register is retried on its own; the instance's other
// schedules go on running meanwhile.
func TestARefusedScheduleDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	_, err := d.Pool.Exec(context.Background(), `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by policy' USING ERRCODE = '42501'; END $$;
		CREATE TRIGGER refuse BEFORE INSERT ON pglock_cron_schedules FOR EACH ROW
		WHEN (NEW.name = 'refused') EXECUTE FUNCTION refuse();`)
	require.NoError(t, err)
	l := newLedger()
	s := start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("fine", "@every 1s", nil, l.fn)) })
	require.NoError(t, s.Add("refused", "@every 1s", nil, l.fn))
	first := l.next(t, "fine")
	for {
		if run := l.next(t, "fine"); run.ScheduledTime.Sub(first.ScheduledTime) >= 3*time.Second {
			break
		}
	}
	require.Empty(t, l.of("refused"))
}

// Instances whose backends are killed (pg_terminate_backend) again and again, mid-claim and
// mid-run, never run a tick twice, and every tick is accounted for: it ran, or it is recorded
// (abandoned when the claim committed but its answer was lost with the connection; on a busy
// machine also skipped while such a run's lease lasted, failed when a run lost its lease, or
// missed when no claim came in time): none is left without a record, or pending.
func TestKilledBackendsNeverRunATickTwice(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLedger()
	opts := &cron.Options{TTL: time.Second}
	for i := range 3 {
		pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("victim-%d", i) })
		start(t, pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("tough", "@every 1s", opts, l.fn)) })
	}
	first := l.next(t, "tough")
	deadline := time.Now().Add(6 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		_, err := d.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1`, fmt.Sprintf("victim-%d", i%3))
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
	}
	byTick := map[time.Time]int{}
	for _, r := range l.of("tough") {
		byTick[r.ScheduledTime]++
		require.Equal(t, 1, byTick[r.ScheduledTime], "tick %s ran twice", r.ScheduledTime)
	}
	last := first.ScheduledTime.Add(5 * time.Second)
	var unaccounted []string
	testdb.WaitFor(t, func() bool {
		records := map[time.Time]cron.Status{}
		for _, r := range history(t, d.Pool, "tough") {
			records[r.ScheduledTime] = r.Status
			for tick := r.ScheduledTime.Add(time.Second); !tick.After(r.MissedUntil); tick = tick.Add(time.Second) {
				records[tick] = r.Status // a missed record stands for its ticks
			}
		}
		unaccounted = unaccounted[:0]
		for tick := first.ScheduledTime; !tick.After(last); tick = tick.Add(time.Second) {
			switch records[tick] {
			case cron.StatusRan, cron.StatusAbandoned, cron.StatusSkipped, cron.StatusFailed, cron.StatusMissed:
			default:
				unaccounted = append(unaccounted, fmt.Sprintf("%s: %q", tick.Format(time.TimeOnly), records[tick]))
			}
		}
		return len(unaccounted) == 0
	}, "every tick up to the last recorded (unaccounted: %v)", lazy(func() any { return unaccounted }))
}

// Recording that an instance still has its schedules never deadlocks with claims, which lock
// the same rows in name order, however the rows lie in the table.
func TestSeenAndClaimsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	var names []string
	for i := 40; i > 0; i-- { // inserted in reverse name order
		name := fmt.Sprintf("s%02d", i)
		names = append(names, name)
		_, err := d.Pool.Exec(ctx, `SELECT pglock_cron_register($1, '@hourly', 'UTC', 'skip', 'skip', 1000, 1000, 10, 'test')`, name)
		require.NoError(t, err)
	}
	seen, until := make([]time.Time, len(names)), make([]time.Time, len(names))
	ttls := make([]int64, len(names))
	for i := range names {
		seen[i], until[i], ttls[i] = time.Unix(0, 0), time.Unix(1, 0), 30000 // every row locked, then answered stale
	}
	stop := time.Now().Add(3 * time.Second)
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			var err error
			for err == nil && time.Now().Before(stop) {
				if w%2 == 0 {
					_, err = d.Pool.Exec(ctx, `SELECT pglock_cron_seen($1, 'test')`, names)
				} else {
					_, err = d.Pool.Exec(ctx, `SELECT * FROM pglock_cron_claim('test', $1, $2, $3, $4, '{}', '{}', '{}', '{}', '{}')`,
						names, seen, until, ttls)
				}
			}
			errs <- err
		}()
	}
	for range 4 {
		require.NoError(t, testdb.Receive(t, errs))
	}
}

// lazy is a value formatted when a failure's message is, not when the wait begins.
type lazy func() any

func (f lazy) String() string { return fmt.Sprint(f()) }
