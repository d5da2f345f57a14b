package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/ops"

	"github.com/pglock/pglock/internal/testdb"
)

// A sound installation: every check says ok, and doctor exits 0.
func TestDoctorFindsNothingWrongWithASoundInstallation(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	out, _, code := pglockctl(t, context.Background(), d.URL(), "doctor")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "ok       schema ")
	require.Contains(t, out, "ok       expired rows ")
	require.Contains(t, out, "ok       elections ")
	require.Contains(t, out, "ok       timeouts      statement_timeout is off")
	require.Contains(t, out, "ok       schedules ")
	require.Contains(t, out, "ok       statistics ")
	require.Contains(t, out, "ok       advisory ")
	require.Contains(t, out, "ok       clocks        no live scheduler instance has measured its clock")
	require.NotContains(t, out, "fix:")
}

// Rows expired long ago are a warning (exit 1), with gc for the fix.
func TestDoctorWarnsOfExpiredRowsAwaitingGC(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `SELECT acquire_lock_ms('stale', 'h', 100); UPDATE distributed_locks SET expires_at = now() - interval '2 minutes';
		SELECT acquire_lock_ms('fresh', 'h', 100)`) // expired a moment ago: ordinary
	require.NoError(t, err)
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitWarnings, code, out)
	require.Contains(t, out, "warning  expired rows  1 lock rows and 0 queue places expired more than 1m0s ago")
	require.Contains(t, out, "fix: run `pglockctl gc`")

	_, _, code = pglockctl(t, ctx, d.URL(), "gc")
	require.Equal(t, exitOK, code)
	_, _, code = pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitOK, code, "the fix mends it")
}

// Three planted problems: a function edited by hand, an election whose leader's lease ran out
// long ago with a candidate still queued, and rows awaiting gc. Doctor names each, exits 2, and
// says the same in JSON.
func TestDoctorNamesEachPlantedProblem(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `
		CREATE OR REPLACE FUNCTION pglock_gc() RETURNS TABLE (expired_locks bigint, expired_waiters bigint)
			LANGUAGE sql AS $$ SELECT 0::bigint, 0::bigint $$;
		SELECT acquire_lock_ms('pglock.leader/reconciler', 'old-leader', 100);
		UPDATE distributed_locks SET expires_at = now() - interval '5 minutes';
		INSERT INTO distributed_lock_waiters (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at)
			VALUES ('pglock.leader/reconciler', 'candidate', 'app@host:1', 30000, '{}', now() - interval '5 minutes', now() + interval '30 seconds')`)
	require.NoError(t, err)

	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	t.Logf("pglockctl doctor:\n%s", out)
	require.Equal(t, exitProblems, code, out)
	require.Contains(t, out, "problem  schema        1 objects are not what version")
	require.Contains(t, out, "function pglock_gc() changed")
	require.Contains(t, out, "fix: run `pglockctl migrate repair`")
	require.Contains(t, out, "problem  elections     no leader for over 1m0s while candidates wait: reconciler")
	require.Contains(t, out, "warning  expired rows  1 lock rows")

	out, _, code = pglockctl(t, ctx, d.URL(), "-o", "json", "doctor", "--grace", "10m")
	require.Equal(t, exitProblems, code)
	var report struct{ Findings []ops.Finding }
	require.NoError(t, json.Unmarshal([]byte(out), &report))
	severities := map[string]ops.Severity{}
	for _, f := range report.Findings {
		severities[f.Check] = f.Severity
	}
	require.Equal(t, map[string]ops.Severity{"schema": ops.SeverityProblem, "expired rows": ops.SeverityOK, "elections": ops.SeverityOK,
		"timeouts": ops.SeverityOK, "schedules": ops.SeverityOK, "statistics": ops.SeverityOK, "advisory": ops.SeverityOK, "clocks": ops.SeverityOK, "privileges": ops.SeverityOK,
		"pooler": ops.SeverityOK}, severities, "with a grace of 10 minutes, rows 5 minutes old are not named")
}

// An installation without pglock's SQL: one problem, and the command that fixes it.
func TestDoctorSaysToMigrateAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	out, _, code := pglockctl(t, context.Background(), d.URL(), "doctor")
	require.Equal(t, exitProblems, code, out)
	require.Contains(t, out, "problem  schema        pglock's SQL is not installed\n")
	require.Contains(t, out, "fix: run `pglockctl migrate up`")
}

// Timeouts set on the database that would cut pglock's statements or RunTx's transactions short
// are warnings, with the setting to use.
func TestDoctorWarnsOfTimeoutsThatCutPglockShort(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET statement_timeout = %L', current_database(), '200ms');
		EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L', current_database(), '5s');
	END $$`)
	require.NoError(t, err)
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitWarnings, code, out)
	require.Contains(t, out, "warning  timeouts      statement_timeout is 200ms: ")
	require.Contains(t, out, "fix: ALTER ROLE <pglock's role> SET statement_timeout = '5s'")
	require.Contains(t, out, "warning  timeouts      idle_in_transaction_session_timeout is 5s: ")
}

// A runtime schedule whose kind no instance handles runs nowhere: a warning naming it.
func TestDoctorWarnsOfSchedulesNoInstanceRuns(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, stderr, code := pglockctl(t, ctx, d.URL(), "cron", "create", "nightly-report", "--kind", "report", "--spec", "@daily", "--note", "doctor test")
	require.Equal(t, exitOK, code, stderr)
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitWarnings, code, out)
	require.Contains(t, out, `warning  schedules     1 schedules run nowhere, their ticks are missed: nightly-report (no instance handles kind "report")`)

	_, _, code = pglockctl(t, ctx, d.URL(), "cron", "pause", "nightly-report", "--note", "not yet")
	require.Equal(t, exitOK, code)
	out, _, code = pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitOK, code, "a paused schedule is expected not to run: %s", out)
}

// A table analyzed while empty and filled since is planned as empty: a warning naming it. And an
// idle session holding an advisory lock past --advisory-held is named with its pid.
func TestDoctorWarnsOfEmptyStatisticsAndAdvisoryLocksHeldLong(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `ANALYZE pglock_jobs;
		INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token, started_at, retain_until, created_at)
			SELECT '', 'job-' || i, 'succeeded', 'h', 'i', 1, i, now(), now() + interval '1 day', now() FROM generate_series(1, 3000) AS i`)
	require.NoError(t, err)
	holder, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	var pid int
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock(42)) AS taken`).Scan(&pid))
	testdb.WaitFor(t, func() bool {
		var idle bool
		d.Pool.QueryRow(ctx, `SELECT state_change < clock_timestamp() - interval '300 milliseconds' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&idle)
		return idle
	}, "the holder has been idle for 300 ms")

	out, _, code := pglockctl(t, ctx, d.URL(), "doctor", "--advisory-held", "250ms")
	require.Equal(t, exitWarnings, code, out)
	require.Contains(t, out, "warning  statistics    planner statistics say empty")
	require.Contains(t, out, "pglock_jobs (")
	require.Contains(t, out, fmt.Sprintf("warning  advisory      sessions idle for over 250ms hold advisory locks (held at least that long): pid %d (", pid))

	_, err = d.Pool.Exec(ctx, `ANALYZE pglock_jobs`)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock(42)`)
	require.NoError(t, err)
	out, _, code = pglockctl(t, ctx, d.URL(), "doctor", "--advisory-held", "250ms")
	require.Equal(t, exitOK, code, "the fixes mend both: %s", out)
}

// A live scheduler instance whose host clock is off by more than a second is named with its
// offset; one within it is listed as ok.
func TestDoctorNamesInstancesWhoseClocksAreOff(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `SELECT pglock_cron_seen_clock('{}', 'app@drifting:1', 5000000, 2000);
		SELECT pglock_cron_seen_clock('{}', 'app@synced:2', -3000, 1000)`)
	require.NoError(t, err)
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitWarnings, code, out)
	require.Contains(t, out, "warning  clocks        1 instances' clocks are over 1s off the database's: app@drifting:1 +5s (±2ms)")
	require.NotContains(t, out, "app@synced:2", "within a second: not named")
}

// A role granted part of what semaphores need (a grant made before pglock_take_all, say) is a
// problem naming what is missing; the superuser the tests connect as may use every part.
func TestDoctorNamesAPartOfPglockGrantedOnlyInPart(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "may use: table locks and advisory names, jobs, ratelimit, semaphores, cron scheduler, cron controls (an operator's)")

	role := d.NewRole(t, "doctor_app")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO %[1]s;
		GRANT EXECUTE ON FUNCTION pglock_semaphore_attempt(varchar, varchar, integer, bigint, jsonb, varchar, boolean),
			pglock_semaphore_take(varchar, varchar, integer, integer, varchar, integer, bigint, jsonb, varchar, boolean) TO %[1]s`, role))
	require.NoError(t, err)
	asRole := func(role string) string {
		return d.URL() + "&options=" + strings.ReplaceAll(url.PathEscape("-c role="+role), "=", "%3D")
	}
	out, stderr, code := pglockctl(t, ctx, asRole(role), "doctor")
	require.Equal(t, exitProblems, code, "%s%s", out, stderr)
	require.Contains(t, out+stderr, "problem  privileges    role "+role+" is granted part of: semaphores (missing pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb, varchar, boolean))")

	// Granted the cron controls as docs/sql.md grants them to an operator's role, which share
	// pglock_cron_collect() with the scheduler's part: no part is named granted in part.
	operator := d.NewRole(t, "doctor_ops")
	var grant []string
	for _, g := range ops.Grants {
		if strings.HasPrefix(g.Part, "cron controls") {
			grant = g.Functions
		}
	}
	_, err = d.Pool.Exec(ctx, fmt.Sprintf(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO %[1]s; GRANT EXECUTE ON FUNCTION %[2]s TO %[1]s`,
		operator, strings.Join(grant, ", ")))
	require.NoError(t, err)
	out, stderr, code = pglockctl(t, ctx, asRole(operator), "doctor")
	require.Equal(t, exitOK, code, "%s%s", out, stderr)
	require.Contains(t, out, "ok       privileges    role "+operator+" may use: cron controls (an operator's)\n")
}

// Through a real PgBouncer (transaction pooling), doctor says something sits between, with
// docs/pgbouncer.md's settings for the fix; directly, it says so.
func TestDoctorSeesAPoolerBetween(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	out, _, code := pglockctl(t, ctx, d.URL(), "doctor")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "ok       pooler        this connection reaches PostgreSQL directly")

	out, stderr, code := pglockctl(t, ctx, d.ThroughPgBouncer(t, "default_query_exec_mode=exec"), "doctor")
	require.Equal(t, exitWarnings, code, "%s%s", out, stderr)
	require.Contains(t, out, "warning  pooler        PostgreSQL sees this connection come from port ")
	require.Contains(t, out, "fix: if it is PgBouncer in transaction mode, follow docs/pgbouncer.md")
}
