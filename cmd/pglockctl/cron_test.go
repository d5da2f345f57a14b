package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

func TestCronListHistoryPauseResumeTriggerBackfill(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	ran := make(chan cron.Run, 100)
	s, err := cron.New(d.NewPool(t, nil), &cron.Config{AppName: "ctl-test"})
	require.NoError(t, err)
	require.NoError(t, s.Add("nightly", "CRON_TZ=Europe/Berlin 0 2 * * *", nil, func(_ context.Context, run cron.Run) error {
		ran <- run
		return nil
	}))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })

	out, stderr, code := pglockctl(t, ctx, d.URL(), "cron", "list")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^NAME\s+KIND\s+SPEC\s+ZONE\s+OVERLAP\s+CATCH-UP\s+STATE\s+LAST RUN\s+NEXT$`, lines[0])
	require.Regexp(t, `^nightly\s+-\s+CRON_TZ=Europe/Berlin 0 2 \* \* \*\s+Europe/Berlin\s+skip\s+skip\s+active\s+-\s+(\S+T0[01]:00:00Z ){4}\S+T0[01]:00:00Z$`, lines[1])

	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "trigger", "nightly", "--by", "alice")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `^triggered "nightly": run \d+\n$`, out)
	require.Equal(t, cron.RunKindManual, testdb.Receive(t, ran).Kind)

	from := time.Now().UTC().Add(-72 * time.Hour).Format(time.RFC3339)
	to := time.Now().UTC().Add(-24 * time.Hour).Format(time.RFC3339)
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "backfill", "nightly", "--from", from, "--to", to)
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "queued 2 ticks of \"nightly\"\n", out)
	for range 2 {
		require.Equal(t, cron.RunKindBackfill, testdb.Receive(t, ran).Kind)
	}

	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "pause", "nightly", "--note", "db upgrade", "--by", "bob")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "paused \"nightly\": db upgrade\n", out)
	out, _, _ = pglockctl(t, ctx, d.URL(), "-o", "json", "cron", "list")
	var list struct {
		Now       time.Time        `json:"now"`
		Schedules []map[string]any `json:"schedules"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.False(t, list.Now.IsZero())
	got := list.Schedules[0]
	// The field names docs/pglockctl.md documents.
	for _, key := range []string{"name", "kind", "spec", "time_zone", "overlap", "catch_up", "state", "pause_note", "paused_by",
		"last_instance", "last_seen_at", "last_status", "last_tick", "next"} {
		require.Contains(t, got, key)
	}
	require.Len(t, got, 14, "no undocumented field")
	require.Nil(t, got["kind"], "defined in code")
	require.Equal(t, "paused", got["state"])
	require.Equal(t, "bob", got["paused_by"])
	require.Len(t, got["next"], 5)
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "resume", "nightly")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "resumed \"nightly\"\n", out)

	testdb.WaitFor(t, func() bool {
		out, _, _ = pglockctl(t, ctx, d.URL(), "-o", "json", "cron", "history", "nightly")
		var h struct {
			Runs []map[string]any `json:"runs"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &h), out)
		done := 0
		for _, r := range h.Runs {
			// The field names docs/pglockctl.md documents (a missed row adds two).
			for _, key := range []string{"id", "tick", "kind", "status", "attempt", "instance", "requested_by", "token",
				"started_at", "finished_at", "duration_ms", "error"} {
				require.Contains(t, r, key)
			}
			require.Len(t, r, 12, "no undocumented field")
			if r["status"] == "ran" {
				done++
			}
		}
		return done == 3
	})
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "history", "nightly")
	require.Equal(t, exitOK, code, stderr)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Regexp(t, `^ID\s+TICK\s+KIND\s+STATUS\s+ATTEMPT\s+INSTANCE\s+STARTED\s+TOOK\s+ERROR$`, lines[0])
	require.Regexp(t, `^\d+\s+\S+\s+manual\s+ran\s+1\s+ctl-test@\S+\s+\S+\s+\S+\s+-$`, lines[1])
	require.Regexp(t, `^\d+\s+\S+T0[01]:00:00Z\s+backfill\s+ran\s+1\s+`, lines[2]) // 02:00 in Berlin
}

func TestCronCommandErrors(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"cron", "pause", "nightly"}, exitUsage, "--note must say why"},
		{[]string{"cron", "backfill", "nightly", "--from", "yesterday", "--to", "2026-11-01T00:00:00Z"}, exitUsage, "--from must be an RFC 3339 time"},
		{[]string{"cron", "backfill", "nightly", "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z"}, exitUsage, "--to is before --from"},
		{[]string{"cron", "history", "nightly", "--limit", "0"}, exitUsage, "--limit must be positive"},
		{[]string{"cron", "trigger"}, exitUsage, "accepts 1 arg"},
		{[]string{"cron", "trigger", "no-such"}, exitFailure, "not found"},
		{[]string{"cron", "pause", "no-such", "--note", "x"}, exitFailure, "not found"},
		{[]string{"cron", "history", "no-such"}, exitFailure, "not found"},
	} {
		_, stderr, code := pglockctl(t, ctx, d.URL(), c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.says, "%v", c.args)
	}
}

// A schedule created with pglockctl runs on the instances that handle its kind only, each tick
// once; update and delete change and stop it; -o json, --dry-run and the exit codes are as
// documented.
func TestCronCreateUpdateDelete(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	type ran struct {
		instance int
		run      cron.Run
	}
	runs := make(chan ran, 1000)
	for i := range 3 {
		s, err := cron.New(d.NewPool(t, nil), &cron.Config{AppName: "ctl-test"})
		require.NoError(t, err)
		if i < 2 { // the third instance lacks kind B's handler
			require.NoError(t, s.Handle("B", func(_ context.Context, run cron.Run) error {
				runs <- ran{i, run}
				return nil
			}))
		}
		require.NoError(t, s.Add(fmt.Sprint("in-code-", i), "@hourly", nil, func(context.Context, cron.Run) error { return nil }))
		require.NoError(t, s.Start(ctx))
		t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	}

	out, stderr, code := pglockctl(t, ctx, d.URL(), "cron", "create", "tenant-7", "--kind", "B", "--spec", "@every 1s",
		"--args", `{"tenant": 7}`, "--note", "onboarding", "--by", "carol", "--dry-run")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "\"tenant-7\" would be created (dry run: nothing changed): kind B, spec @every 1s\n", out)
	var now time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	startAt := now.Add(3 * time.Second).Truncate(time.Second).UTC()
	out, stderr, code = pglockctl(t, ctx, d.URL(), "-o", "json", "cron", "create", "tenant-7", "--kind", "B", "--spec", "@every 1s",
		"--args", `{"tenant": 7}`, "--note", "onboarding", "--by", "carol", "--overlap", "allow", "--start", startAt.Format(time.RFC3339))
	require.Equal(t, exitOK, code, stderr)
	var created struct {
		Op       string         `json:"op"`
		DryRun   bool           `json:"dry_run"`
		Schedule map[string]any `json:"schedule"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created), out)
	require.Equal(t, "create", created.Op)
	for _, key := range []string{"name", "kind", "spec", "time_zone", "args", "overlap", "catch_up", "catch_up_window_ms",
		"timeout_ms", "ttl_ms", "retention_ms", "max_runs", "jitter_ms", "start", "end", "run_limit", "pause_after_failures"} {
		require.Contains(t, created.Schedule, key)
	}
	require.Len(t, created.Schedule, 17, "no undocumented field")

	first := testdb.Receive(t, runs)
	require.JSONEq(t, `{"tenant": 7}`, string(first.run.Args))
	require.Equal(t, startAt, first.run.ScheduledTime.UTC(), "its first due tick ran")
	seen := map[int]bool{}
	for len(seen) < 2 || len(runs) > 0 {
		r := testdb.Receive(t, runs)
		require.Less(t, r.instance, 2, "only instances that handle B run it")
		seen[r.instance] = true
	}

	var rows, ticks int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT scheduled_time) FROM pglock_cron_runs
		WHERE schedule = 'tenant-7' AND kind = 'scheduled'`).Scan(&rows, &ticks))
	require.Equal(t, ticks, rows, "each tick once")
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "update", "tenant-7", "--spec", "@every 2s", "--note", "slower")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "\"tenant-7\" updated: kind B, spec @every 2s\n", out)
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "list")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^tenant-7\s+B\s+@every 2s\s+UTC\s+allow\s+skip\s+active\s`, out, "update keeps what it was not given")
	out, stderr, code = pglockctl(t, ctx, d.URL(), "cron", "delete", "tenant-7", "--note", "offboarding")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "\"tenant-7\" deleted: kind B, spec @every 2s\n", out)
	var changes string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT string_agg(op || ':' || coalesce(changed_by, '') || ':' || note, ',' ORDER BY id)
		FROM pglock_cron_changes`).Scan(&changes))
	require.Regexp(t, `^define:carol:onboarding,update:[^:]+:slower,delete:[^:]+:offboarding$`, changes)

	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"cron", "create", "x", "--kind", "B", "--spec", "@every 1s"}, exitUsage, "--note must say why"},
		{[]string{"cron", "create", "x", "--kind", "B", "--spec", "61 * * * *", "--note", "n"}, exitUsage, "invalid cron spec"},
		{[]string{"cron", "create", "x", "--kind", "B", "--spec", "@every 1m", "--args", "{", "--note", "n"}, exitUsage, "--args must be JSON"},
		{[]string{"cron", "create", "x", "--kind", "B", "--spec", "@every 1m", "--jitter", "2m", "--note", "n"}, exitUsage, "Jitter"},
		{[]string{"cron", "create", "x", "--kind", "B", "--spec", "@every 1m", "--zone", "Mars/Olympus", "--note", "n"}, exitUsage, "--zone"},
		{[]string{"cron", "create", "in-code-0", "--kind", "B", "--spec", "@every 1m", "--note", "n"}, exitConflict, "already exists"},
		{[]string{"cron", "update", "in-code-0", "--spec", "@every 1m", "--note", "n"}, exitConflict, "defined in code"},
		{[]string{"cron", "delete", "in-code-0", "--note", "n"}, exitConflict, "defined in code"},
		{[]string{"cron", "update", "tenant-7", "--spec", "@every 1m", "--note", "n"}, exitNotFound, "not found"},
		{[]string{"cron", "delete", "tenant-7", "--note", "n"}, exitNotFound, "not found"},
	} {
		_, stderr, code := pglockctl(t, ctx, d.URL(), c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.says, "%v", c.args)
	}
	var recorded int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_cron_changes`).Scan(&recorded))
	require.Equal(t, 3, recorded, "refused commands change nothing")
}
