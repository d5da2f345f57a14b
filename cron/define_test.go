package cron_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

// handled records the runs of one instance's handlers.
type handled struct {
	mu   sync.Mutex
	runs []cron.Run
}

func (h *handled) fn(_ context.Context, run cron.Run) error {
	h.mu.Lock()
	h.runs = append(h.runs, run)
	h.mu.Unlock()
	return nil
}

func (h *handled) of(schedule string) []cron.Run {
	h.mu.Lock()
	defer h.mu.Unlock()
	var list []cron.Run
	for _, r := range h.runs {
		if r.Schedule == schedule {
			list = append(list, r)
		}
	}
	return list
}

// dbNow reads the database's clock: after a statement returned, what it did has committed.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now))
	return now
}

// Three instances, one of which lacks kind B's handler: a schedule of kind B defined at runtime
// fires on the other two only, each tick once; an update of its spec and arguments takes effect
// from the next tick on (no tick of the old spec after the update commits, none of the new one
// lost); a delete stops it at once.
func TestRuntimeScheduleFiresOnceOnInstancesThatHandleItsKind(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var b1, b2, a handled
	for i, h := range []*handled{&b1, &b2, &a} {
		pool := d.NewPool(t, nil)
		start(t, pool, nil, func(s *cron.Scheduler) {
			if i < 2 {
				require.NoError(t, s.Handle("B", h.fn))
			}
			require.NoError(t, s.Handle("A", h.fn))
		})
	}
	all := func() []cron.Run { return append(append(b1.of("tenant-1"), b2.of("tenant-1")...), a.of("tenant-1")...) }

	defined := dbNow(t, d.Pool)
	require.NoError(t, cron.Define(context.Background(), d.Pool, cron.Definition{
		Name: "tenant-1", Kind: "B", Spec: "@every 1s", Args: json.RawMessage(`{"v": 1}`),
		Options: &cron.Options{Overlap: cron.OverlapAllow},
	}, &cron.Change{By: "test", Note: "first"}))
	testdb.WaitFor(t, func() bool { return len(all()) >= 4 })
	require.Empty(t, a.of("tenant-1"), "the instance without B's handler runs none")

	require.NoError(t, cron.Update(context.Background(), d.Pool, cron.Definition{
		Name: "tenant-1", Kind: "B", Spec: "@every 3s", Args: json.RawMessage(`{"v": 2}`),
		Options: &cron.Options{Overlap: cron.OverlapAllow},
	}, &cron.Change{By: "test", Note: "slower"}))
	updated := dbNow(t, d.Pool)
	testdb.WaitFor(t, func() bool {
		n := 0
		for _, r := range all() {
			if r.ScheduledTime.After(updated) {
				n++
			}
		}
		return n >= 3
	})
	require.NoError(t, cron.Delete(context.Background(), d.Pool, "tenant-1", &cron.Change{By: "test", Note: "gone"}))
	deleted := dbNow(t, d.Pool)
	time.Sleep(4 * time.Second) // a tick of either spec would have come

	runs := all()
	byTick := map[time.Time]int{}
	var after []time.Time
	for _, r := range runs {
		byTick[r.ScheduledTime]++
		require.False(t, r.ScheduledTime.Before(defined), "no tick before the schedule existed")
		require.False(t, r.ScheduledTime.After(deleted), "no tick after the delete committed: %s", r.ScheduledTime)
		if r.ScheduledTime.After(updated) {
			require.Zero(t, r.ScheduledTime.Unix()%3, "a tick of the old spec after the update: %s", r.ScheduledTime)
			require.JSONEq(t, `{"v": 2}`, string(r.Args))
			after = append(after, r.ScheduledTime)
		} else {
			require.JSONEq(t, `{"v": 1}`, string(r.Args))
		}
	}
	for tick, n := range byTick {
		require.Equal(t, 1, n, "tick %s ran %d times", tick, n)
	}
	first, last := after[0], after[0]
	for _, at := range after {
		first, last = minTime(first, at), maxTime(last, at)
	}
	for at := first; !at.After(last); at = at.Add(3 * time.Second) {
		require.Equal(t, 1, byTick[at], "tick %s of the new spec was lost", at)
	}
	require.NotEmpty(t, b1.of("tenant-1"), "both instances that handle B take ticks")
	require.NotEmpty(t, b2.of("tenant-1"), "both instances that handle B take ticks")

	var changes []string
	rows, err := d.Pool.Query(context.Background(), `SELECT op || ' by ' || changed_by || ': ' || note FROM pglock_cron_changes
		WHERE schedule = 'tenant-1' ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		changes = append(changes, c)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"define by test: first", "update by test: slower", "delete by test: gone"}, changes)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// An instance that cannot LISTEN learns of a new schedule by polling, in time for its first
// tick; a schedule whose kind nobody handles is shown unhandled, and a handled one is not.
func TestRuntimeScheduleIsFoundByPollingAndUnhandledIsShown(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var h handled
	start(t, d.Pool, &cron.Config{DisableNotifications: true, PollInterval: 200 * time.Millisecond}, func(s *cron.Scheduler) {
		require.NoError(t, s.Handle("report", h.fn))
	})
	from := dbNow(t, d.Pool).Add(3 * time.Second).Truncate(time.Second)
	for _, def := range []cron.Definition{
		{Name: "polled", Kind: "report", Spec: "@every 1s", Options: &cron.Options{Start: from}},
		{Name: "nobody", Kind: "unknown-kind", Spec: "@every 1s"},
	} {
		require.NoError(t, cron.Define(context.Background(), d.Pool, def, nil))
	}
	testdb.WaitFor(t, func() bool { return len(h.of("polled")) >= 2 })
	records := history(t, d.Pool, "polled")
	require.Equal(t, from, records[0].ScheduledTime, "the first tick, at Start, ran")
	require.Equal(t, cron.StatusRan, records[0].Status)

	list, err := cron.List(context.Background(), d.Pool)
	require.NoError(t, err)
	byName := map[string]cron.ScheduleInfo{}
	for _, s := range list {
		byName[s.Name] = s
	}
	require.False(t, byName["polled"].Unhandled)
	require.True(t, byName["nobody"].Unhandled, "no instance handles its kind")
	require.Equal(t, "unknown-kind", byName["nobody"].Kind)
	require.Empty(t, history(t, d.Pool, "nobody"), "never run by an instance without its handler")
}

// A tick in flight (past its time, its jitter not yet come) when the schedule's arguments and
// jitter are updated runs once, as the new definition says: neither lost nor doubled.
func TestUpdateKeepsTheJitteredTickInFlight(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var h handled
	start(t, d.Pool, nil, func(s *cron.Scheduler) { require.NoError(t, s.Handle("k", h.fn)) })
	const every, jitter = 10 * time.Second, 9 * time.Second
	// A name whose next tick's jitter leaves time to update in flight, under both jitters.
	tick := dbNow(t, d.Pool).Add(2 * time.Second).Truncate(every).Add(every)
	name := ""
	for i := 0; name == ""; i++ {
		if n := fmt.Sprint("in-flight-", i); cron.JitterOf(n, tick, jitter) >= 4*time.Second && cron.JitterOf(n, tick, jitter-time.Second) >= 4*time.Second {
			name = n
		}
	}
	def := cron.Definition{Name: name, Kind: "k", Spec: "@every 10s", Args: json.RawMessage(`"old"`),
		Options: &cron.Options{Jitter: jitter, Start: tick}}
	require.NoError(t, cron.Define(context.Background(), d.Pool, def, nil))
	for dbNow(t, d.Pool).Before(tick.Add(time.Second)) {
		time.Sleep(100 * time.Millisecond)
	}
	require.Empty(t, h.of(name), "the tick waits for its jitter")
	def.Args, def.Options.Jitter = json.RawMessage(`"new"`), jitter-time.Second
	require.NoError(t, cron.Update(context.Background(), d.Pool, def, nil))
	testdb.WaitFor(t, func() bool { return len(h.of(name)) >= 1 })
	time.Sleep(time.Second) // a second run of it would come now
	runs := h.of(name)
	require.Len(t, runs, 1)
	require.Equal(t, tick, runs[0].ScheduledTime, "the ledger keeps the nominal tick")
	require.JSONEq(t, `"new"`, string(runs[0].Args))
}

// The spec extras, on schedules added in code and defined at runtime alike: a run limit
// finishes a schedule (kept, not deleted), an end bound ends it, failures in a row pause it
// with a note, and Resume clears the count.
func TestRunLimitEndAndPauseAfterFailures(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var h handled
	failing := func(context.Context, cron.Run) error { return errBoom }
	now := dbNow(t, d.Pool)
	end := now.Add(5 * time.Second).Truncate(time.Second)
	start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("limited", "@every 1s", &cron.Options{RunLimit: 3}, h.fn))
		require.NoError(t, s.Add("failing", "@every 1s", &cron.Options{PauseAfterFailures: 2}, failing))
		require.NoError(t, s.Handle("k", h.fn))
	})
	require.NoError(t, cron.Define(context.Background(), d.Pool, cron.Definition{Name: "ending", Kind: "k", Spec: "@every 1s",
		Options: &cron.Options{End: end}}, nil))
	require.NoError(t, cron.Define(context.Background(), d.Pool, cron.Definition{Name: "limited-runtime", Kind: "k",
		Spec: "@every 1s", Options: &cron.Options{RunLimit: 2}}, nil))
	info := func(name string) cron.ScheduleInfo {
		list, err := cron.List(context.Background(), d.Pool)
		require.NoError(t, err)
		for _, s := range list {
			if s.Name == name {
				return s
			}
		}
		t.Fatalf("no schedule %q", name)
		return cron.ScheduleInfo{}
	}
	testdb.WaitFor(t, func() bool {
		return info("limited").Finished && info("limited-runtime").Finished && info("failing").Paused && info("ending").Finished
	})
	time.Sleep(2 * time.Second) // a run past a limit would come now
	require.Len(t, h.of("limited"), 3)
	require.Len(t, h.of("limited-runtime"), 2)
	require.Empty(t, info("limited").Next, "a finished schedule has no next tick")
	require.NotEmpty(t, h.of("ending"), "its ticks before End ran")
	for _, r := range h.of("ending") {
		require.False(t, r.ScheduledTime.After(end), "a tick after End ran: %s", r.ScheduledTime)
	}

	failed := info("failing")
	require.Equal(t, 2, failed.FailuresInRow)
	require.Equal(t, "pglock", failed.PausedBy)
	require.Contains(t, failed.PauseNote, "paused after 2 failed runs in a row")
	require.Contains(t, failed.PauseNote, errBoom.Error())
	require.NoError(t, cron.Resume(context.Background(), d.Pool, "failing"))
	require.Zero(t, info("failing").FailuresInRow, "resume clears the count")
}

var errBoom = &boomError{}

type boomError struct{}

func (*boomError) Error() string { return "boom" }

// Bad definitions get typed errors, and nothing is written: not the schedule, not a change.
func TestBadDefinitionsAreRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	start(t, d.Pool, nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("in-code", "@every 1h", nil, func(context.Context, cron.Run) error { return nil }))
	})
	require.NoError(t, cron.Define(context.Background(), d.Pool, cron.Definition{Name: "runtime", Kind: "k", Spec: "@hourly"}, nil))
	ok := cron.Definition{Name: "new", Kind: "k", Spec: "@every 1m"}
	with := func(f func(*cron.Definition)) cron.Definition {
		def := ok
		f(&def)
		return def
	}
	now := time.Now()
	for _, c := range []struct {
		name string
		def  cron.Definition
		want error
	}{
		{"empty name", with(func(d *cron.Definition) { d.Name = "" }), pglock.ErrInvalidName},
		{"empty kind", with(func(d *cron.Definition) { d.Kind = "" }), pglock.ErrInvalidName},
		{"invalid spec", with(func(d *cron.Definition) { d.Spec = "61 * * * *" }), pglock.ErrInvalidSpec},
		{"unknown zone", with(func(d *cron.Definition) { d.Spec = "CRON_TZ=Mars/Olympus 0 * * * *" }), pglock.ErrInvalidSpec},
		{"L with a day of the week", with(func(d *cron.Definition) { d.Spec = "0 0 L * MON" }), pglock.ErrInvalidSpec},
		{"args not JSON", with(func(d *cron.Definition) { d.Args = json.RawMessage(`{"a":`) }), pglock.ErrInvalidArgument},
		{"args too large", with(func(d *cron.Definition) {
			d.Args = json.RawMessage(`"` + strings.Repeat("x", cron.MaxArgs) + `"`)
		}), pglock.ErrInvalidArgument},
		{"args with NUL", with(func(d *cron.Definition) { d.Args = json.RawMessage(`"\u0000"`) }), pglock.ErrInvalidArgument},
		{"jitter as long as the interval", with(func(d *cron.Definition) { d.Options = &cron.Options{Jitter: time.Minute} }), pglock.ErrInvalidArgument},
		{"negative jitter", with(func(d *cron.Definition) { d.Options = &cron.Options{Jitter: -time.Second} }), pglock.ErrInvalidArgument},
		{"end before start", with(func(d *cron.Definition) {
			d.Options = &cron.Options{Start: now, End: now.Add(-time.Hour)}
		}), pglock.ErrInvalidArgument},
		{"negative run limit", with(func(d *cron.Definition) { d.Options = &cron.Options{RunLimit: -1} }), pglock.ErrInvalidArgument},
		{"negative pause after failures", with(func(d *cron.Definition) { d.Options = &cron.Options{PauseAfterFailures: -1} }), pglock.ErrInvalidArgument},
		{"TTL too short", with(func(d *cron.Definition) { d.Options = &cron.Options{TTL: time.Millisecond} }), pglock.ErrInvalidTTL},
		{"name of a schedule in code", with(func(d *cron.Definition) { d.Name = "in-code" }), pglock.ErrExists},
		{"name of a runtime schedule", with(func(d *cron.Definition) { d.Name = "runtime" }), pglock.ErrExists},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := snapshotSchedules(t, d.Pool)
			require.ErrorIs(t, cron.Define(context.Background(), d.Pool, c.def, nil), c.want)
			require.ErrorIs(t, cron.Define(context.Background(), d.Pool, c.def, &cron.Change{DryRun: true}), c.want, "a dry run says the same")
			require.Equal(t, before, snapshotSchedules(t, d.Pool))
		})
	}
	before := snapshotSchedules(t, d.Pool)
	require.NoError(t, cron.Define(context.Background(), d.Pool, ok, &cron.Change{DryRun: true}))
	require.ErrorIs(t, cron.Update(context.Background(), d.Pool, with(func(d *cron.Definition) { d.Name = "in-code" }), nil), pglock.ErrDefinedInCode)
	require.ErrorIs(t, cron.Delete(context.Background(), d.Pool, "in-code", nil), pglock.ErrDefinedInCode)
	require.ErrorIs(t, cron.Update(context.Background(), d.Pool, with(func(d *cron.Definition) { d.Name = "absent" }), nil), pglock.ErrNotFound)
	require.ErrorIs(t, cron.Delete(context.Background(), d.Pool, "absent", nil), pglock.ErrNotFound)
	require.Equal(t, before, snapshotSchedules(t, d.Pool), "a dry run writes nothing")

	// A schedule in code named as a runtime one is refused when registered.
	s, err := cron.New(d.NewPool(t, nil), &cron.Config{AppName: "cron-test"})
	require.NoError(t, err)
	require.NoError(t, s.Add("runtime", "@hourly", nil, func(context.Context, cron.Run) error { return nil }))
	require.ErrorIs(t, s.Start(context.Background()), pglock.ErrExists)
	require.NoError(t, s.Stop(context.Background()))
}

// snapshotSchedules is what the schedules' and changes' tables hold, as text.
func snapshotSchedules(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT string_agg(name || ':' || spec || ':' || revision, ',' ORDER BY name) FROM pglock_cron_schedules), '') || '|' ||
		coalesce((SELECT string_agg(id::text, ',' ORDER BY id) FROM pglock_cron_changes), '')`).Scan(&s))
	return s
}

// pglock_cron_define checks what it can itself, for callers in other languages: each bad
// argument is refused with SQLSTATE 22023 naming it, and nothing is written.
func TestDefineInSQLRefusesBadArgumentsByName(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	good := []string{`'n'`, `'k'`, `'@hourly'`, `'UTC'`, `NULL`, `'skip'`, `'skip'`, `86400000`, `604800000`, `1000`,
		`30000`, `0`, `0`, `NULL`, `NULL`, `NULL`, `NULL`, `false`, `'by'`, `'note'`}
	for _, c := range []struct {
		arg    int
		value  string
		column string
	}{
		{0, `''`, "p_name"},
		{1, `NULL`, "p_kind"},
		{2, `''`, "p_spec"},
		{3, `'Mars/Olympus'`, "p_time_zone"},
		{4, `to_jsonb(repeat('x', 140000))`, "p_args"},
		{5, `'sometimes'`, "p_overlap"},
		{6, `'never'`, "p_catch_up"},
		{7, `0`, "p_catch_up_window_ms"},
		{10, `1`, "p_ttl_ms"},
		{11, `-1`, "p_timeout_ms"},
		{12, `-1`, "p_jitter_ms"},
		{14, `'2000-01-01'`, "p_ends_at"}, // before p_starts_at, set below
		{15, `0`, "p_run_limit"},
		{16, `-3`, "p_pause_after_failures"},
		{17, `NULL`, "p_replace"},
	} {
		args := append([]string(nil), good...)
		args[c.arg] = c.value
		if c.column == "p_ends_at" {
			args[13] = `'2001-01-01'`
		}
		_, err := d.Pool.Exec(context.Background(), `SELECT pglock_cron_define(`+strings.Join(args, ", ")+`)`)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, c.column)
		require.Equal(t, "22023", pgErr.Code, c.column)
		require.Equal(t, c.column, pgErr.ColumnName)
	}
	require.Equal(t, "|", snapshotSchedules(t, d.Pool))
}

// A new spec takes the old spec's ticks waiting their turn (buffered, caught up) with it: they
// are recorded skipped, never run after the update; another change keeps them. A new kind is
// unhandled until an instance handles it.
func TestUpdateOfTheSpecSkipsTheOldSpecsQueuedTicks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	def := cron.Definition{Name: "queued", Kind: "a", Spec: "@every 1m"}
	require.NoError(t, cron.Define(ctx, d.Pool, def, nil))
	queue := func(tick time.Time) {
		_, err := d.Pool.Exec(ctx, `INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
			VALUES ('queued', $1, 'catch_up', 'pending', 1, now())`, tick)
		require.NoError(t, err)
	}
	status := func(tick time.Time) (s string) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT status FROM pglock_cron_runs WHERE schedule = 'queued' AND scheduled_time = $1`, tick).Scan(&s))
		return s
	}
	first, second := time.Now().Add(-2*time.Hour).Truncate(time.Minute), time.Now().Add(-time.Hour).Truncate(time.Minute)
	queue(first)
	def.Args = json.RawMessage(`{"v": 2}`)
	require.NoError(t, cron.Update(ctx, d.Pool, def, nil))
	require.Equal(t, "pending", status(first), "the same spec keeps its queued ticks")
	_, err := d.Pool.Exec(ctx, `UPDATE pglock_cron_schedules SET last_instance = 'i', last_seen_at = now() WHERE name = 'queued'`)
	require.NoError(t, err)

	queue(second)
	def.Spec, def.Kind = "@every 2m", "b"
	require.NoError(t, cron.Update(ctx, d.Pool, def, nil))
	require.Equal(t, "skipped", status(first), "the old spec's queued ticks do not run")
	require.Equal(t, "skipped", status(second))
	list, err := cron.List(ctx, d.Pool)
	require.NoError(t, err)
	require.True(t, list[0].Unhandled, "no instance has handled its new kind")
}

// In a rolling deploy, a v0.1.0 scheduler's calls neither undo the extras a newer one gave a
// schedule nor get answers v0.1.0 does not know.
func TestVersion010SchedulersKeepTheExtrasAndGetAnswersTheyKnow(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `SELECT pglock_cron_register_extras('s', '@every 1s', 'UTC', 'skip', 'skip', 1000, 1000, 10, 'new',
		5000, NULL, NULL, 2, 3)`)
	require.NoError(t, err)
	var until time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pglock_cron_register('s', '@every 1s', 'UTC', 'skip', 'skip', 1000, 1000, 10, 'old')`).Scan(&until))
	var jitter int64
	var limit, pauseAfter int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT jitter_ms, run_limit, pause_after_failures FROM pglock_cron_schedules WHERE name = 's'`).
		Scan(&jitter, &limit, &pauseAfter))
	require.Equal(t, []any{int64(5000), 2, 3}, []any{jitter, limit, pauseAfter})

	_, err = d.Pool.Exec(ctx, `UPDATE pglock_cron_schedules SET runs_started = 2, accounted_until = $1 WHERE name = 's'`, until.Add(-time.Minute))
	require.NoError(t, err)
	tick := until.Add(-time.Minute).Truncate(time.Second).Add(time.Second)
	rows, err := d.Pool.Query(ctx, `SELECT outcome FROM pglock_cron_claim('old', ARRAY['s'], ARRAY[$1::timestamptz], ARRAY[$2::timestamptz],
		ARRAY[3000::bigint], ARRAY['s'], ARRAY[$2::timestamptz], ARRAY['scheduled'], ARRAY[$2::timestamptz], ARRAY[0::bigint])`,
		until.Add(-time.Minute), tick)
	require.NoError(t, err)
	for rows.Next() {
		var outcome string
		require.NoError(t, rows.Scan(&outcome))
		require.Contains(t, []string{"run", "stale", "early", "unknown"}, outcome)
	}
	require.NoError(t, rows.Err())
}

// A claim planned with a definition's old revision is refused, whatever it carries: no tick of
// a replaced spec starts once the update has committed, however late an instance hears of it;
// a claim of a deleted schedule starts nothing.
func TestClaimsRefuseAnOldRevisionAndADeletedSchedule(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	def := cron.Definition{Name: "r", Kind: "k", Spec: "@every 1s"}
	require.NoError(t, cron.Define(ctx, d.Pool, def, nil))
	var old int64
	var seen time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT revision, accounted_until FROM pglock_cron_schedules WHERE name = 'r'`).Scan(&old, &seen))
	def.Args = json.RawMessage(`1`)
	require.NoError(t, cron.Update(ctx, d.Pool, def, nil))
	time.Sleep(1100 * time.Millisecond) // a tick after the watermark is due
	tick := seen.Truncate(time.Second).Add(time.Second)
	claim := func(revision int64) []string {
		rows, err := d.Pool.Query(ctx, `SELECT outcome FROM pglock_cron_claim_reporting('i', ARRAY['r'], ARRAY[$1::timestamptz],
			ARRAY[$2::timestamptz], ARRAY[3000::bigint], ARRAY[$3::bigint], ARRAY['r'], ARRAY[$2::timestamptz], ARRAY['scheduled'],
			ARRAY[$2::timestamptz], ARRAY[0::bigint], true)`, seen, tick, revision)
		require.NoError(t, err)
		var outcomes []string
		for rows.Next() {
			var o string
			require.NoError(t, rows.Scan(&o))
			outcomes = append(outcomes, o)
		}
		require.NoError(t, rows.Err())
		return outcomes
	}
	runs := func() (n int) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_cron_runs WHERE schedule = 'r'`).Scan(&n))
		return n
	}
	require.Equal(t, []string{"changed"}, claim(old), "the old revision")
	require.Equal(t, []string{"changed"}, claim(0), "as if it were a schedule in code")
	require.Zero(t, runs())
	require.NoError(t, cron.Delete(ctx, d.Pool, "r", nil))
	require.Equal(t, []string{"unknown"}, claim(old+1))
	require.Zero(t, runs())
}
