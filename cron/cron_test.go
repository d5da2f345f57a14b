package cron_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// start starts a Scheduler on pool with the given schedules added, stopped when the test ends.
func start(t *testing.T, pool *pgxpool.Pool, cfg *cron.Config, add func(s *cron.Scheduler)) *cron.Scheduler {
	t.Helper()
	if cfg == nil {
		cfg = &cron.Config{}
	}
	cfg.AppName = "cron-test"
	s, err := cron.New(pool, cfg)
	require.NoError(t, err)
	if add != nil {
		add(s)
	}
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s
}

// ledger records the runs fns make, by schedule and tick.
type ledger struct {
	mu   sync.Mutex
	runs map[string][]cron.Run
	ran  chan cron.Run
}

func newLedger() *ledger {
	return &ledger{runs: map[string][]cron.Run{}, ran: make(chan cron.Run, 10000)}
}

func (l *ledger) record(run cron.Run) {
	l.mu.Lock()
	l.runs[run.Schedule] = append(l.runs[run.Schedule], run)
	l.mu.Unlock()
	l.ran <- run
}

// fn records each run and returns nil.
func (l *ledger) fn(_ context.Context, run cron.Run) error {
	l.record(run)
	return nil
}

func (l *ledger) of(schedule string) []cron.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]cron.Run(nil), l.runs[schedule]...)
}

// next returns the next run recorded of schedule.
func (l *ledger) next(t *testing.T, schedule string) cron.Run {
	t.Helper()
	for {
		if run := testdb.Receive(t, l.ran); run.Schedule == schedule {
			return run
		}
	}
}

// history returns the schedule's runs, oldest tick first.
func history(t *testing.T, pool *pgxpool.Pool, name string) []cron.RunRecord {
	t.Helper()
	list, err := cron.History(context.Background(), pool, name, 10000)
	require.NoError(t, err)
	for i, j := 0, len(list)-1; i < j; i, j = i+1, j-1 {
		list[i], list[j] = list[j], list[i]
	}
	return list
}

func statuses(records []cron.RunRecord) map[cron.Status]int {
	m := map[cron.Status]int{}
	for _, r := range records {
		m[r.Status]++
	}
	return m
}

// Five instances with no leader run every tick of an @every 1s schedule exactly once, and miss
// none, also after two of them vanish (their pools closed, no Stop) mid-way. (OverlapAllow: with
// the default Skip, ticks that come while a vanished run's lease lasts are skipped, by design.)
func TestEveryTickRunsExactlyOnceAcrossInstances(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLedger()
	var schedulers []*cron.Scheduler
	var pools []*pgxpool.Pool
	for range 5 {
		pool := d.NewPool(t, nil)
		s, err := cron.New(pool, &cron.Config{AppName: "cron-test"})
		require.NoError(t, err)
		// Ticks run beside a vanished instance's last run, its outcome unrecorded, until that
		// run is abandoned at its lease's end (Skip would skip the ticks that come while it
		// looks alive). The lease has seconds of room: a busy machine does not lose runs.
		require.NoError(t, s.Add("every-second", "@every 1s", &cron.Options{TTL: 3 * time.Second, Overlap: cron.OverlapAllow}, l.fn))
		require.NoError(t, s.Start(context.Background()))
		schedulers, pools = append(schedulers, s), append(pools, pool)
	}
	stopAll := func(list []*cron.Scheduler) {
		for _, s := range list {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			require.NoError(t, s.Stop(ctx))
			cancel()
		}
	}
	first := l.next(t, "every-second")
	time.Sleep(7 * time.Second)
	pools[0].Close()
	pools[1].Close()
	time.Sleep(8 * time.Second)
	stopAll(schedulers[2:])
	stopAll(schedulers[:2])

	runs := l.of("every-second")
	byTick := map[time.Time]int{}
	last := first.ScheduledTime
	for _, r := range runs {
		byTick[r.ScheduledTime]++
		if r.ScheduledTime.After(last) {
			last = r.ScheduledTime
		}
	}
	for tick := first.ScheduledTime; !tick.After(last); tick = tick.Add(time.Second) {
		require.Equal(t, 1, byTick[tick], "tick %s ran %d times (none missed, none twice)", tick, byTick[tick])
	}
	require.GreaterOrEqual(t, len(byTick), 13)
	abandoned := 0
	for _, r := range history(t, d.Pool, "every-second") {
		// A vanished instance's run whose outcome it could not record is recorded abandoned.
		require.Contains(t, []cron.Status{cron.StatusRan, cron.StatusAbandoned}, r.Status, "%+v", r)
		if r.Status == cron.StatusAbandoned {
			abandoned++
		}
	}
	require.LessOrEqual(t, abandoned, 2, "only the vanished instances' last runs")
}

// A host whose clock is two minutes ahead never fires early; one two minutes behind misses
// nothing: both fire on the database's clock.
func TestSkewedHostClocksFireOnDatabaseTime(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{2 * time.Minute, -2 * time.Minute} {
		t.Run(fmt.Sprint(skew), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			type start struct {
				run cron.Run
				at  time.Time // by the database's clock
			}
			starts := make(chan start, 100)
			lags := make(chan time.Duration, 100)
			s, err := cron.New(d.Pool, &cron.Config{AppName: "cron-test", Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
				if e.Kind == pglock.EventCronRun {
					lags <- e.Lag
				}
			})})
			require.NoError(t, err)
			cron.SetClock(s, skewedClock(skew))
			require.NoError(t, s.Add("skewed", "@every 1s", nil, func(ctx context.Context, run cron.Run) error {
				var now time.Time
				err := d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
				starts <- start{run, now}
				return err
			}))
			require.NoError(t, s.Start(context.Background()))
			t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
			offset := s.Stats().ClockOffset
			require.InDelta(t, float64(-skew), float64(offset), float64(time.Second), "the offset is reported")

			var prev time.Time
			for range 4 {
				st := testdb.Receive(t, starts)
				require.False(t, st.at.Before(st.run.ScheduledTime), "fired early: %s before %s", st.at, st.run.ScheduledTime)
				if !prev.IsZero() {
					require.Equal(t, prev.Add(time.Second), st.run.ScheduledTime, "no tick missed")
				}
				prev = st.run.ScheduledTime
				// The lag its event reports is the database's too, not off by the skew.
				// (How late a run starts is the machine's; off by the skew, it would be minutes.)
				lag := testdb.Receive(t, lags)
				require.True(t, lag >= 0 && lag < 30*time.Second, "lag %s", lag)
			}
		})
	}
}

func TestOverlapPolicies(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		overlap cron.Overlap
		check   func(t *testing.T, first error, records []cron.RunRecord)
	}{
		{cron.OverlapSkip, func(t *testing.T, first error, records []cron.RunRecord) {
			require.NoError(t, first)
			require.Equal(t, cron.StatusRan, records[0].Status)
			require.Equal(t, cron.StatusSkipped, records[1].Status, "the tick during the run is skipped")
			require.Equal(t, "a run was running", records[1].Error)
		}},
		{cron.OverlapBufferOne, func(t *testing.T, first error, records []cron.RunRecord) {
			require.NoError(t, first)
			require.Equal(t, cron.StatusRan, records[0].Status)
			require.Equal(t, cron.StatusRan, records[1].Status, "the first tick during the run is buffered, then runs")
			require.False(t, records[1].StartedAt.Before(records[0].FinishedAt), "after the run ended")
			require.Equal(t, cron.StatusSkipped, records[2].Status, "a second tick during the run is skipped")
		}},
		{cron.OverlapAllow, func(t *testing.T, first error, records []cron.RunRecord) {
			require.NoError(t, first)
			require.Equal(t, cron.StatusRan, records[1].Status)
			require.True(t, records[1].StartedAt.Before(records[0].FinishedAt), "the runs overlap")
		}},
		{cron.OverlapReplace, func(t *testing.T, first error, records []cron.RunRecord) {
			require.ErrorIs(t, first, pglock.ErrReplaced, "the replaced run's ctx says why")
			require.Equal(t, cron.StatusCanceled, records[0].Status)
			require.Contains(t, records[0].Error, "replaced by the run of")
			require.Equal(t, cron.StatusRan, records[1].Status)
		}},
	} {
		t.Run(string(c.overlap), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			firstDone := make(chan error, 1)
			var mu sync.Mutex
			n := 0
			start(t, d.Pool, nil, func(s *cron.Scheduler) {
				require.NoError(t, s.Add("slow", "@every 1s", &cron.Options{Overlap: c.overlap},
					func(ctx context.Context, run cron.Run) error {
						mu.Lock()
						n++
						first := n == 1
						mu.Unlock()
						if !first {
							return nil
						}
						// The first run lasts over two more ticks (or until replaced).
						select {
						case <-ctx.Done():
							firstDone <- context.Cause(ctx)
							return context.Cause(ctx)
						case <-time.After(2500 * time.Millisecond):
							firstDone <- nil
							return nil
						}
					}))
			})
			first := testdb.Receive(t, firstDone)
			var records []cron.RunRecord
			testdb.WaitFor(t, func() bool {
				records = history(t, d.Pool, "slow")
				settled := 0
				for _, r := range records {
					if r.Status != cron.StatusRunning && r.Status != cron.StatusPending {
						settled++
					}
				}
				return len(records) >= 4 && settled >= 4
			}, "four settled runs")
			c.check(t, first, records)
		})
	}
}

// setWatermark makes a schedule look as if no instance had run it since at.
func setWatermark(t *testing.T, pool *pgxpool.Pool, name string, at time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE pglock_cron_schedules SET accounted_until = $2 WHERE name = $1`, name, at)
	require.NoError(t, err)
}

// register adds a schedule to the database as an instance would, and stops.
func register(t *testing.T, pool *pgxpool.Pool, name, spec string, opts *cron.Options) {
	t.Helper()
	s, err := cron.New(pool, &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	require.NoError(t, s.Add(name, spec, opts, func(context.Context, cron.Run) error { return nil }))
	require.NoError(t, s.Start(context.Background()))
	require.NoError(t, s.Stop(context.Background()))
}

// After every instance was down, missed ticks are recorded missed, or run as the catch-up
// policy says.
func TestCatchUpAfterEveryInstanceWasDown(t *testing.T) {
	t.Parallel()
	// Yearly ticks: three were missed, the latest long enough ago to be late.
	now := time.Now().UTC()
	year := func(y int) time.Time { return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC) }
	y := now.Year()
	for _, c := range []struct {
		name    string
		catchUp cron.CatchUp
		window  time.Duration
		ran     []time.Time
		missed  cron.RunRecord
	}{
		{"skip", cron.CatchUpSkip, 0, nil,
			cron.RunRecord{ScheduledTime: year(y - 2), MissedUntil: year(y), MissedCount: 3}},
		{"latest", cron.CatchUpLatest, now.Sub(year(y)) + time.Hour, []time.Time{year(y)},
			cron.RunRecord{ScheduledTime: year(y - 2), MissedUntil: year(y - 1), MissedCount: 2}},
		{"all", cron.CatchUpAll, now.Sub(year(y-1)) + time.Hour, []time.Time{year(y - 1), year(y)},
			cron.RunRecord{ScheduledTime: year(y - 2), MissedUntil: year(y - 2), MissedCount: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			opts := &cron.Options{CatchUp: c.catchUp, CatchUpWindow: c.window}
			register(t, d.Pool, "yearly", "0 0 1 1 *", opts)
			setWatermark(t, d.Pool, "yearly", year(y-2).Add(-time.Hour))
			l := newLedger()
			start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("yearly", "0 0 1 1 *", opts, l.fn)) })
			for _, want := range c.ran {
				run := l.next(t, "yearly")
				require.Equal(t, want, run.ScheduledTime.UTC(), "oldest first")
				require.Equal(t, cron.RunKindCatchUp, run.Kind)
			}
			var records []cron.RunRecord
			testdb.WaitFor(t, func() bool {
				records = history(t, d.Pool, "yearly")
				return len(records) == 1+len(c.ran) && statuses(records)[cron.StatusRan] == len(c.ran)
			}, "the runs recorded")
			missed := records[0]
			require.Equal(t, cron.StatusMissed, missed.Status)
			require.Equal(t, c.missed.ScheduledTime, missed.ScheduledTime.UTC())
			require.Equal(t, c.missed.MissedUntil, missed.MissedUntil.UTC())
			require.Equal(t, c.missed.MissedCount, missed.MissedCount)
		})
	}
}

// Pause is honoured from the next tick, with its note; resume runs ticks again.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLedger()
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("pausable", "@every 1s", nil, l.fn)) })
	l.next(t, "pausable")
	ctx := context.Background()
	require.NoError(t, cron.Pause(ctx, d.Pool, "pausable", "maintenance window", "ops@example"))
	var pausedAt time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&pausedAt))
	testdb.WaitFor(t, func() bool {
		return statuses(history(t, d.Pool, "pausable"))[cron.StatusSkipped] >= 2
	}, "two ticks skipped while paused")
	for _, r := range l.of("pausable") {
		require.False(t, r.ScheduledTime.After(pausedAt.Add(time.Second)), "no tick after the pause ran")
	}
	for _, r := range history(t, d.Pool, "pausable") {
		if r.Status == cron.StatusSkipped {
			require.Equal(t, "paused: maintenance window", r.Error)
		}
	}
	list, err := cron.List(ctx, d.Pool)
	require.NoError(t, err)
	require.True(t, list[0].Paused)
	require.Equal(t, "ops@example", list[0].PausedBy)

	require.NoError(t, cron.Resume(ctx, d.Pool, "pausable"))
	var resumedAt time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&resumedAt))
	for {
		if run := l.next(t, "pausable"); run.ScheduledTime.After(resumedAt) {
			break
		}
	}
	require.ErrorIs(t, cron.Pause(ctx, d.Pool, "no-such", "", ""), pglock.ErrNotFound)
	require.ErrorIs(t, cron.Resume(ctx, d.Pool, "no-such"), pglock.ErrNotFound)
}

// A trigger starts a manual run at once (woken by a notification, or by a poll without one),
// recorded as manual; it never takes a tick's place.
func TestTriggerStartsAManualRun(t *testing.T) {
	t.Parallel()
	for _, notifications := range []bool{true, false} {
		t.Run(fmt.Sprintf("notifications=%v", notifications), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			l := newLedger()
			start(t, d.Pool, &cron.Config{DisableNotifications: !notifications, PollInterval: 500 * time.Millisecond},
				func(s *cron.Scheduler) { require.NoError(t, s.Add("yearly", "0 0 1 1 *", nil, l.fn)) })
			id, err := cron.Trigger(context.Background(), d.Pool, "yearly", "alice")
			require.NoError(t, err)
			run := l.next(t, "yearly")
			require.Equal(t, cron.RunKindManual, run.Kind)
			require.Equal(t, 1, run.Attempt)
			testdb.WaitFor(t, func() bool {
				records := history(t, d.Pool, "yearly")
				return len(records) == 1 && records[0].Status == cron.StatusRan
			}, "the manual run recorded")
			records := history(t, d.Pool, "yearly")
			require.Equal(t, id, records[0].ID)
			require.Equal(t, "alice", records[0].RequestedBy)
			require.Equal(t, cron.RunKindManual, records[0].Kind)
			_, err = cron.Trigger(context.Background(), d.Pool, "no-such", "alice")
			require.ErrorIs(t, err, pglock.ErrNotFound)
		})
	}
}

// Backfill runs each tick of a past range once, oldest first, and skips ticks that ran.
func TestBackfillRunsEachPastTickOnce(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLedger()
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("hourly", "0 * * * *", nil, l.fn)) })
	ctx := context.Background()
	to := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	from := to.Add(-2 * time.Hour)
	n, err := cron.Backfill(ctx, d.Pool, "hourly", from, to, "bob")
	require.NoError(t, err)
	require.Equal(t, 3, n)
	for i := range 3 {
		run := l.next(t, "hourly")
		require.Equal(t, cron.RunKindBackfill, run.Kind)
		require.Equal(t, from.Add(time.Duration(i)*time.Hour), run.ScheduledTime.UTC())
	}
	testdb.WaitFor(t, func() bool { return statuses(history(t, d.Pool, "hourly"))[cron.StatusRan] == 3 }, "three backfilled runs recorded")
	n, err = cron.Backfill(ctx, d.Pool, "hourly", from.Add(-time.Hour), to, "bob")
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the tick that has not run")
	require.Equal(t, from.Add(-time.Hour), l.next(t, "hourly").ScheduledTime.UTC())

	_, err = cron.Backfill(ctx, d.Pool, "hourly", to, from, "bob")
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = cron.Backfill(ctx, d.Pool, "hourly", time.Now().Add(time.Hour), time.Now().Add(3*time.Hour), "bob")
	require.ErrorIs(t, err, pglock.ErrInvalidArgument, "future ticks cannot be backfilled")
	_, err = cron.Backfill(ctx, d.Pool, "no-such", from, to, "bob")
	require.ErrorIs(t, err, pglock.ErrNotFound)
}

// A panic in fn is recovered and recorded as a failed run with its message and stack; later
// ticks run.
func TestPanicIsRecordedAsAFailedRun(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ran := make(chan cron.Run, 100)
	start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("panicky", "@every 1s", nil, func(ctx context.Context, run cron.Run) error {
			ran <- run
			if len(ran) == 1 {
				panic("boom")
			}
			return nil
		}))
	})
	testdb.Receive(t, ran)
	testdb.Receive(t, ran)
	var records []cron.RunRecord
	testdb.WaitFor(t, func() bool {
		records = history(t, d.Pool, "panicky")
		s := statuses(records)
		return s[cron.StatusFailed] == 1 && s[cron.StatusRan] >= 1
	}, "a failed and a successful run")
	for _, r := range records {
		if r.Status == cron.StatusFailed {
			require.True(t, strings.HasPrefix(r.Error, "panic: boom\n"), r.Error)
			require.Contains(t, r.Error, "cron.callRecovering", "with its stack")
		}
	}
}

// Bad input is refused at the call with a typed error, and nothing is written.
func TestBadInputIsRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	_, err := cron.New(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = cron.New(d.Pool, &cron.Config{PollInterval: -time.Second})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = cron.New(d.Pool, &cron.Config{AppName: "bad\x00app"})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)

	s, err := cron.New(d.Pool, &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	fn := func(context.Context, cron.Run) error { return nil }
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	for _, c := range []struct {
		name, spec string
		opts       *cron.Options
		fn         cron.Func
		want       error
		says       string
	}{
		{"", "@hourly", nil, fn, pglock.ErrInvalidName, ""},
		{strings.Repeat("x", 256), "@hourly", nil, fn, pglock.ErrInvalidName, ""},
		{"bad\x00name", "@hourly", nil, fn, pglock.ErrInvalidName, ""},
		{"nil-fn", "@hourly", nil, nil, pglock.ErrInvalidArgument, "nil fn"},
		{"empty", "", nil, fn, pglock.ErrInvalidSpec, "empty"},
		{"fields", "* * *", nil, fn, pglock.ErrInvalidSpec, "expected"},
		{"range", "61 * * * *", nil, fn, pglock.ErrInvalidSpec, "above maximum"},
		{"word", "every minute", nil, fn, pglock.ErrInvalidSpec, ""},
		{"descriptor", "@fortnightly", nil, fn, pglock.ErrInvalidSpec, "unrecognized descriptor"},
		{"every-sub-second", "@every 500ms", nil, fn, pglock.ErrInvalidSpec, "whole number of seconds"},
		{"every-negative", "@every -5s", nil, fn, pglock.ErrInvalidSpec, "at least 1s"},
		{"every-garbage", "@every soon", nil, fn, pglock.ErrInvalidSpec, "needs a duration"},
		{"tz-unknown", "CRON_TZ=Mars/Olympus 0 2 * * *", nil, fn, pglock.ErrInvalidSpec, "unknown time zone"},
		{"tz-alone", "CRON_TZ=UTC", nil, fn, pglock.ErrInvalidSpec, "followed by a space"},
		{"tz-local", "TZ=Local 0 2 * * *", nil, fn, pglock.ErrInvalidSpec, "Local differs"},
		{"never", "0 0 30 2 *", nil, fn, pglock.ErrInvalidSpec, "never fires"},
		{"local-location", "@hourly", &cron.Options{Location: time.Local}, fn, pglock.ErrInvalidArgument, "time.Local"},
		{"unnamed-zone", "0 2 * * *", &cron.Options{Location: time.FixedZone("", 3600)}, fn, pglock.ErrInvalidArgument, "has no name"},
		{"unloadable-zone", "0 2 * * *", &cron.Options{Location: time.FixedZone("UTC+1", 3600)}, fn, pglock.ErrInvalidArgument, "cannot be loaded"},
		{"long", "0 2 * * *" + strings.Repeat(" ", 1100) + "x", nil, fn, pglock.ErrInvalidSpec, "the limit is 1024"},
		{"negative-timeout", "@hourly", &cron.Options{Timeout: -time.Second}, fn, pglock.ErrInvalidArgument, "Timeout"},
		{"negative-window", "@hourly", &cron.Options{CatchUpWindow: -time.Second}, fn, pglock.ErrInvalidArgument, "CatchUpWindow"},
		{"negative-retention", "@hourly", &cron.Options{Retention: -time.Hour}, fn, pglock.ErrInvalidArgument, "Retention"},
		{"negative-max-runs", "@hourly", &cron.Options{MaxRuns: -1}, fn, pglock.ErrInvalidArgument, "MaxRuns"},
		{"huge-max-runs", "@hourly", &cron.Options{MaxRuns: 1 << 31}, fn, pglock.ErrInvalidArgument, "MaxRuns"},
		{"negative-ttl", "@hourly", &cron.Options{TTL: -time.Second}, fn, pglock.ErrInvalidTTL, ""},
		{"bad-overlap", "@hourly", &cron.Options{Overlap: "sometimes"}, fn, pglock.ErrInvalidArgument, "Overlap"},
		{"bad-catch-up", "@hourly", &cron.Options{CatchUp: "most"}, fn, pglock.ErrInvalidArgument, "CatchUp"},
	} {
		err := s.Add(c.name, c.spec, c.opts, c.fn)
		require.ErrorIs(t, err, c.want, "%q %q: %v", c.name, c.spec, err)
		require.Contains(t, err.Error(), c.says)
	}
	require.NoError(t, s.Add("good", "  CRON_TZ=Europe/Berlin 0 2 * * *"+strings.Repeat(" ", 1100), &cron.Options{Location: berlin}, fn),
		"spaces around a spec do not count")
	require.ErrorIs(t, s.Add("good", "@hourly", nil, fn), pglock.ErrInvalidArgument, "a duplicate name")
	require.ErrorIs(t, s.Remove("never-added"), pglock.ErrNotFound)
	require.NoError(t, s.Start(context.Background()))
	require.ErrorIs(t, s.Start(context.Background()), pglock.ErrInvalidArgument, "started twice")
	require.NoError(t, s.Stop(context.Background()))
	require.ErrorIs(t, s.Add("late", "@hourly", nil, fn), pglock.ErrClosed)

	list, err := cron.List(context.Background(), d.Pool)
	require.NoError(t, err)
	require.Len(t, list, 1, "only the good schedule was written")
	require.Equal(t, "good", list[0].Name)
	require.Equal(t, "CRON_TZ=Europe/Berlin 0 2 * * *", list[0].Spec)
	require.Len(t, list[0].Next, 5)
	for _, next := range list[0].Next {
		require.Equal(t, 2, next.In(berlin).Hour())
	}
	var runs int
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pglock_cron_runs`).Scan(&runs))
	require.Zero(t, runs)

	_, err = cron.History(context.Background(), d.Pool, "good", 0)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = cron.History(context.Background(), d.Pool, "no-such", 10)
	require.ErrorIs(t, err, pglock.ErrNotFound)
}

// Stop waits for a run until its ctx ends, then cancels it (pglock.ErrClosed) and records it
// canceled.
func TestStopCancelsRunsThatOutliveItsContext(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	started := make(chan struct{}, 100)
	causes := make(chan error, 100)
	s, err := cron.New(d.Pool, &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	require.NoError(t, s.Add("stubborn", "@every 1s", nil, func(ctx context.Context, run cron.Run) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}))
	require.NoError(t, s.Start(context.Background()))
	testdb.Receive(t, started)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Stop(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, testdb.Receive(t, causes), pglock.ErrClosed)
	records := history(t, d.Pool, "stubborn")
	require.Equal(t, cron.StatusCanceled, records[0].Status)
	require.Contains(t, records[0].Error, "scheduler stopped")
}

// A run's timeout ends its ctx, and the run is recorded failed.
func TestTimeoutBoundsARun(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	causes := make(chan error, 100)
	start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("bounded", "@every 1s", &cron.Options{Timeout: 100 * time.Millisecond},
			func(ctx context.Context, run cron.Run) error {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return context.Cause(ctx)
			}))
	})
	require.ErrorIs(t, testdb.Receive(t, causes), context.DeadlineExceeded)
	testdb.WaitFor(t, func() bool { return statuses(history(t, d.Pool, "bounded"))[cron.StatusFailed] >= 1 }, "the run recorded failed")
	require.Contains(t, history(t, d.Pool, "bounded")[0].Error, "past its timeout")
}

// An instance partitioned mid-run has its fn's ctx canceled before the lease expires on the
// database; the run is recorded abandoned after the lease's end, is not run twice, and later
// ticks run elsewhere (within the lease's TTL plus a heartbeat and a poll on an idle machine).
func TestPartitionedRunIsCanceledAbandonedAndNotRunTwice(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	// A margin (a tenth of the TTL) of a second: the time a busy machine may take to run the
	// loss's timer, which must fire before the database could give the lease away.
	const ttl = 10 * time.Second
	opts := &cron.Options{TTL: ttl}
	type loss struct {
		run        cron.Run
		cause      error
		stillValid bool // the lease had not expired on the database when fn's ctx ended
	}
	lost := make(chan loss, 1)
	partitioned, partition := d.PartitionablePool(t, nil)
	var once sync.Once
	var heal func()
	a, err := cron.New(partitioned, &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	require.NoError(t, a.Add("leased", "@every 1s", opts, func(fnCtx context.Context, run cron.Run) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		heal = partition()
		live := testdb.LiveWhenDone(t, fnCtx, d.Pool, `SELECT lease_expires_at FROM pglock_cron_runs WHERE fencing_token = $1`, run.Token)
		lost <- loss{run, context.Cause(fnCtx), live}
		return context.Cause(fnCtx)
	}))
	require.NoError(t, a.Start(ctx))

	l := newLedger()
	got := testdb.Receive(t, lost)
	// A second instance joins once the first was partitioned mid-run.
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Add("leased", "@every 1s", opts, l.fn)) })
	require.ErrorIs(t, got.cause, pglock.ErrLockLost)
	require.True(t, got.stillValid, "fn's ctx ended before the lease expired on the database")

	var recordedAt time.Time // by the database's clock, within a poll of waitFor's
	testdb.WaitFor(t, func() bool {
		var status string
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT status, clock_timestamp() FROM pglock_cron_runs WHERE fencing_token = $1`,
			got.run.Token).Scan(&status, &recordedAt))
		return status == string(cron.StatusAbandoned)
	}, "the partitioned run recorded abandoned")
	var expired time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT finished_at FROM pglock_cron_runs WHERE fencing_token = $1`, got.run.Token).Scan(&expired))
	// Recorded after the lease's end, by the instance that has the schedule, within a heartbeat
	// on an idle machine; the bound here is one that only "never" (or the next hourly sweep)
	// breaks, not a latency figure, which a busy machine would make a flaky assertion.
	require.False(t, recordedAt.Before(expired), "recorded abandoned at %s, before its lease expired at %s", recordedAt, expired)
	require.False(t, recordedAt.After(expired.Add(ttl/3+10*time.Second)), "recorded abandoned at %s, lease expired at %s", recordedAt, expired)
	next := l.next(t, "leased")
	bound := expired.Add(ttl/3 + 10*time.Second)
	require.False(t, next.ScheduledTime.After(bound), "the next tick ran at %s, after %s", next.ScheduledTime, bound)
	for _, r := range l.of("leased") {
		require.NotEqual(t, got.run.ScheduledTime, r.ScheduledTime, "the abandoned tick did not run again elsewhere")
	}
	heal()
	require.NoError(t, a.Stop(ctx))
}

// A schedule that a live instance has is never shown as orphaned: the instance records that it
// still has it.
func TestALiveInstanceKeepsItsScheduleFromLookingOrphaned(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s, err := cron.New(d.Pool, &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	cron.SetSeenEvery(s, 100*time.Millisecond)
	require.NoError(t, s.Add("kept", "@hourly", nil, func(context.Context, cron.Run) error { return nil }))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	_, err = d.Pool.Exec(ctx, `UPDATE pglock_cron_schedules SET last_seen_at = clock_timestamp() - interval '6 minutes'`)
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool {
		list, err := cron.List(ctx, d.Pool)
		require.NoError(t, err)
		return !list[0].Orphaned
	}, "the schedule seen again")
}

// Retention keeps at most MaxRuns runs per schedule; List shows a schedule no instance has
// registered for a while as orphaned.
func TestRetentionAndOrphans(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLedger()
	s := start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("kept", "@every 1s", &cron.Options{MaxRuns: 2}, l.fn))
	})
	for range 4 {
		l.next(t, "kept")
	}
	testdb.WaitFor(t, func() bool { return statuses(history(t, d.Pool, "kept"))[cron.StatusRan] >= 4 }, "four runs recorded")
	require.NoError(t, s.Remove("kept"))
	n, err := cron.Collect(ctx, d.Pool)
	require.NoError(t, err)
	require.Positive(t, n)
	require.Len(t, history(t, d.Pool, "kept"), 2)

	_, err = d.Pool.Exec(ctx, `UPDATE pglock_cron_schedules SET last_seen_at = clock_timestamp() - interval '6 minutes'`)
	require.NoError(t, err)
	list, err := cron.List(ctx, d.Pool)
	require.NoError(t, err)
	require.True(t, list[0].Orphaned)
	require.Equal(t, cron.StatusRan, list[0].LastRun.Status)
}
