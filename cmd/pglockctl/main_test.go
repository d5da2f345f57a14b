package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
	"github.com/pglock/pglock/tablelock"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) { testdb.Main(m) }

// pglockctl runs one command line against url, as a user would.
func pglockctl(t *testing.T, ctx context.Context, url string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errs bytes.Buffer
	code = run(ctx, append([]string{"--database-url", url}, args...), &out, &errs)
	return out.String(), errs.String(), code
}

func TestMigrateUpDownStatus(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	ctx := context.Background()
	latest := migrations.Latest()

	out, _, code := pglockctl(t, ctx, d.URL(), "migrate", "status")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, fmt.Sprintf("version  0 of %d\ndirty    false\npending  000001_pglock.up.sql\n", latest))

	out, _, code = pglockctl(t, ctx, d.URL(), "migrate", "up")
	require.Equal(t, exitOK, code)
	require.Equal(t, fmt.Sprintf("version  %d of %d\ndirty    false\ndrift    none: every object is as version %d made it\n", latest, latest, latest), out)

	out, _, code = pglockctl(t, ctx, d.URL(), "-o", "json", "migrate", "down", "--steps", "1")
	require.Equal(t, exitOK, code)
	upFiles, err := fs.Glob(migrations.FS, "*.up.sql")
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"version": %d, "latest": %d, "dirty": false, "pending": [%q], "drift": []}`,
		latest-1, latest, upFiles[len(upFiles)-1]), out)

	_, stderr, code := pglockctl(t, ctx, d.URL(), "migrate", "down")
	require.Equal(t, exitUsage, code, "down needs --steps or --all")
	require.Contains(t, stderr, "--steps N and --all")

	_, _, code = pglockctl(t, ctx, d.URL(), "migrate", "down", "--all")
	require.Equal(t, exitOK, code)
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.Zero(t, status.Version)

	_, _, code = pglockctl(t, ctx, d.URL(), "migrate", "force", "0")
	require.Equal(t, exitOK, code)
}

// A function edited by hand and an index dropped are named by status, which exits with 3 (up,
// with nothing to apply, shows them too); repair makes the function again, and the index, once
// restored by hand, leaves nothing to report.
func TestMigrateStatusNamesDriftAndExitsWith3(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE OR REPLACE FUNCTION pglock_gc() RETURNS TABLE (expired_locks bigint, expired_waiters bigint)
		LANGUAGE sql AS $$ SELECT 0::bigint, 0::bigint $$`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, "DROP INDEX distributed_locks_expires_at_idx")
	require.NoError(t, err)

	out, _, code := pglockctl(t, ctx, d.URL(), "migrate", "status")
	require.Equal(t, exitDrift, code, out)
	require.Contains(t, out, "drift    function pglock_gc() changed\n")
	require.Contains(t, out, "drift    index distributed_locks_expires_at_idx missing\n")
	out, _, code = pglockctl(t, ctx, d.URL(), "-o", "json", "migrate", "status")
	require.Equal(t, exitDrift, code)
	var status struct{ Drift []map[string]string }
	require.NoError(t, json.Unmarshal([]byte(out), &status))
	require.Contains(t, status.Drift, map[string]string{"kind": "function", "name": "pglock_gc()", "change": "changed"})

	out, _, code = pglockctl(t, ctx, d.URL(), "migrate", "up")
	require.Equal(t, exitOK, code, "nothing to apply: up changes nothing, and shows the drift")
	require.Contains(t, out, "drift    function pglock_gc() changed\n")

	_, stderr, code := pglockctl(t, ctx, d.URL(), "migrate", "repair")
	require.Equal(t, exitFailure, code, "repair mends functions, not indexes")
	require.Contains(t, stderr, "index distributed_locks_expires_at_idx missing")
	require.NotContains(t, stderr, "pglock_gc")

	_, err = d.Pool.Exec(ctx, "CREATE INDEX distributed_locks_expires_at_idx ON distributed_locks (expires_at)")
	require.NoError(t, err)
	out, _, code = pglockctl(t, ctx, d.URL(), "migrate", "status")
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, "drift    none")
}

func TestUnmigratedDatabaseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	out, stderr, code := pglockctl(t, context.Background(), d.URL(), "list")
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	require.Contains(t, stderr, "run `pglockctl migrate up`")
}

func TestUsageErrorsExitWith2(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	for _, args := range [][]string{
		{"frobnicate"},
		{"list", "--no-such-flag"},
		{"-o", "yaml", "list"},
		{"list", "--kind", "sideways"},
		{"release"},
		{"release", "x", "--advisory", "y"},
		{"release", "x", "--terminate"},
		{"migrate", "force", "abc"},
		{"version", "extra"},
	} {
		_, stderr, code := pglockctl(t, context.Background(), d.URL(), args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "%v: one line: %q", args, stderr)
	}
}

func TestConnectionErrorsNeverShowThePassword(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://operator:s3cret@127.0.0.1:1/db?connect_timeout=1",
		"host=127.0.0.1 port=1 user=operator password=s3cret dbname=db connect_timeout=1",
		"postgres://operator:s3cret@[::1", // unparsable
	} {
		_, stderr, code := pglockctl(t, context.Background(), url, "list")
		require.NotEqual(t, exitOK, code)
		require.NotContains(t, stderr, "s3cret")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	var out, errs bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"version"}, &out, &errs))
	require.Contains(t, out.String(), "pglockctl v0.1.0 (")
	require.Contains(t, out.String(), fmt.Sprintf("SQL contract %d", migrations.Latest()))
}

// seed makes locks of every kind list shows: a table lock with a waiter, an expired one, a
// registered advisory lock with a waiter blocked on it, and an unnamed one. It returns what
// varies from run to run, to normalize away.
func seed(t *testing.T, d *testdb.DB) (pids []string) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`SELECT pglock_acquire('order:1', 'worker-a', 60000, '{"job": 42}', 'billing@web-1:4242')`,
		`SELECT pglock_acquire('order:1', 'worker-b', 60000, '{}', 'billing@web-2:77', true)`,
		`SELECT pglock_acquire('report:daily', 'cron-7', 1000, '{}', 'cron@web-3:9')`,
		`UPDATE distributed_locks SET expires_at = clock_timestamp() - interval '5 minutes' WHERE lock_name = 'report:daily'`,
	} {
		_, err := d.Pool.Exec(ctx, sql)
		require.NoError(t, err)
	}
	app := func(name string) func(*pgxpool.Config) {
		return func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = name }
	}
	holder, err := advisory.Open(ctx, d.NewPool(t, app("reindexer")), &advisory.Config{RegisterNames: true})
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(context.Background()) })
	require.NoError(t, holder.Lock(ctx, advisory.NamespacedKey("maintenance", "reindex")))
	require.NoError(t, holder.RLock(ctx, advisory.Int64Key(-42)))

	waiter, err := advisory.Open(ctx, d.NewPool(t, app("second-reindexer")), nil)
	require.NoError(t, err)
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- waiter.Lock(waitCtx, advisory.NamespacedKey("maintenance", "reindex")) }()
	t.Cleanup(func() {
		cancel()
		<-done
		waiter.Close(context.Background())
	})
	testdb.WaitFor(t, func() bool {
		locks, err := advisory.List(ctx, d.Pool)
		require.NoError(t, err)
		return len(locks) == 3
	})
	return []string{fmt.Sprint(holder.PID()), fmt.Sprint(waiter.PID())}
}

var (
	timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	relatives  = regexp.MustCompile(`\b(in \d+[smhd]|\d+[smhd] ago|now)\b`)
	padding    = regexp.MustCompile(` {2,}`)
)

// normalized replaces what varies between runs (times, pids) and the padding that depends on
// it; TestTablesAlignColumns checks the alignment itself.
func normalized(out string, pids []string) string {
	out = timestamps.ReplaceAllString(out, "<time>")
	out = relatives.ReplaceAllString(out, "<relative>")
	for i, pid := range pids {
		out = regexp.MustCompile(`\b`+pid+`\b`).ReplaceAllString(out, fmt.Sprintf("<pid%d>", i+1))
	}
	return padding.ReplaceAllString(out, " | ")
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	require.Equal(t, string(want), got)
}

func TestListGolden(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pids := seed(t, d)
	ctx := context.Background()
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"list", []string{"list"}},
		{"list-table-order", []string{"list", "--kind", "table", "--name", "order:*"}},
		{"list-advisory", []string{"list", "--kind", "advisory", "--name", "maintenance/*"}},
	} {
		out, stderr, code := pglockctl(t, ctx, d.URL(), tt.args...)
		require.Equal(t, exitOK, code, stderr)
		golden(t, tt.golden, normalized(out, pids))
	}
}

func TestTablesAlignColumns(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, table(&out, []string{"NAME", "TOKEN"}, [][]string{{"a-long-name", "7"}, {"x", "12345"}}))
	require.Equal(t, "NAME         TOKEN\na-long-name  7\nx            12345\n", out.String())
}

// The JSON's field names are documented (docs/pglockctl.md) and must not change.
func TestListJSONFieldsAreStable(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	seed(t, d)
	out, stderr, code := pglockctl(t, context.Background(), d.URL(), "-o", "json", "list")
	require.Equal(t, exitOK, code, stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	require.Equal(t, []string{"advisory_locks", "now", "table_locks"}, keys(doc))
	tableLock := doc["table_locks"].([]any)[0].(map[string]any)
	require.Equal(t, []string{"acquired_at", "expired", "expires_at", "expires_in_ms", "holder", "instance",
		"metadata", "name", "token", "waiters"}, keys(tableLock))
	require.Equal(t, "order:1", tableLock["name"])
	require.EqualValues(t, 1, tableLock["waiters"])
	require.Equal(t, map[string]any{"job": float64(42)}, tableLock["metadata"])
	expired := doc["table_locks"].([]any)[1].(map[string]any)
	require.Equal(t, true, expired["expired"])
	advisoryLock := doc["advisory_locks"].([]any)[0].(map[string]any)
	require.Equal(t, []string{"application_name", "blocked_by", "client_addr", "granted", "key", "mode", "name",
		"pair", "pid", "session_age_ms", "waiting_ms"}, keys(advisoryLock))
}

func TestWatchRedraws(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	screen := &redrawCounter{atRedraw: 3, reached: interrupt} // Ctrl-C once it has redrawn
	var stderr bytes.Buffer
	code := run(ctx, []string{"--database-url", d.URL(), "list", "--watch", "--interval", "10ms"}, screen, &stderr)
	require.Equal(t, exitOK, code, "an interrupted watch ends normally, even mid-query: %s", stderr.String())
	require.GreaterOrEqual(t, screen.redraws, 3, "redrawn in place")
}

// redrawCounter counts the screen clears written to it and calls reached at the atRedraw-th.
type redrawCounter struct {
	redraws  int
	atRedraw int
	reached  func()
}

func (w *redrawCounter) Write(p []byte) (int, error) {
	w.redraws += bytes.Count(p, []byte("\033[H\033[2J"))
	if w.redraws >= w.atRedraw {
		w.reached()
	}
	return len(p), nil
}

func TestReleaseWithoutForceChangesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	seed(t, d)
	ctx := context.Background()
	before, _, _ := pglockctl(t, ctx, d.URL(), "-o", "json", "list", "--kind", "table")
	out, stderr, code := pglockctl(t, ctx, d.URL(), "release", "order:1")
	require.Equal(t, exitFailure, code)
	require.Contains(t, out, `would release "order:1" held by worker-a (billing@web-1:4242)`)
	require.Contains(t, stderr, "--force")
	after, _, _ := pglockctl(t, ctx, d.URL(), "-o", "json", "list", "--kind", "table")
	require.Equal(t, dropNow(t, before), dropNow(t, after), "nothing changed")

	_, stderr, code = pglockctl(t, ctx, d.URL(), "release", "no-such-lock", "--force")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no table lock named")
}

func dropNow(t *testing.T, out string) string {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	delete(doc, "now")
	for _, l := range doc["table_locks"].([]any) {
		delete(l.(map[string]any), "expires_in_ms")
	}
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	return string(b)
}

// A forced release hands the lock on with a higher token; once nobody waits, the next holder
// also gets a higher token.
func TestForceReleaseThenANewAcquisitionHasAHigherToken(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l, err := tablelock.New(d.Pool, &tablelock.Config{AppName: "pglockctl-test", HeartbeatInterval: -1})
	require.NoError(t, err)
	defer l.Close(ctx)
	held, err := l.TryAcquire(ctx, "stuck", &tablelock.AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)

	out, stderr, code := pglockctl(t, ctx, d.URL(), "release", "stuck", "--force")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, `released "stuck" from `)
	require.Contains(t, out, fmt.Sprintf("token %d; waiters woken", held.Token()))

	next, err := l.TryAcquire(ctx, "stuck", nil)
	require.NoError(t, err)
	require.Greater(t, next.Token(), held.Token())
	out, _, _ = pglockctl(t, ctx, d.URL(), "-o", "json", "list", "--kind", "table")
	require.Contains(t, out, fmt.Sprintf(`"token": %d`, next.Token()))
	require.NoError(t, next.Release(ctx))
}

func TestReleaseAdvisoryTerminatesTheHolder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s, err := advisory.Open(ctx, d.Pool, &advisory.Config{HealthCheckInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close(ctx)
	require.NoError(t, s.Lock(ctx, advisory.NamespacedKey("maintenance", "vacuum")))

	out, _, code := pglockctl(t, ctx, d.URL(), "release", "--advisory", "vacuum", "--namespace", "maintenance")
	require.Equal(t, exitFailure, code)
	require.Contains(t, out, fmt.Sprintf("would end backend %d", s.PID()))
	require.NoError(t, s.Err(), "nothing done without --terminate")

	out, stderr, code := pglockctl(t, ctx, d.URL(), "release", "--advisory", "vacuum", "--namespace", "maintenance", "--terminate")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, fmt.Sprintf("ended backend %d", s.PID()))
	<-s.Lost()

	id, _ := advisory.StringKey("x").Int64()
	_, stderr, code = pglockctl(t, ctx, d.URL(), "release", "--advisory", fmt.Sprint(id), "--terminate")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "nobody holds")
}

func TestGCDeletesExpiredRows(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	seed(t, d)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, "UPDATE distributed_lock_waiters SET expires_at = clock_timestamp() - interval '1 second'")
	require.NoError(t, err)
	seedJobs(t, d)
	_, err = d.Pool.Exec(ctx, "UPDATE pglock_jobs SET retain_until = clock_timestamp() - interval '1 second' WHERE job_key LIKE 'order-%'")
	require.NoError(t, err)
	out, stderr, code := pglockctl(t, ctx, d.URL(), "-o", "json", "gc")
	require.Equal(t, exitOK, code, stderr)
	require.JSONEq(t, `{"expired_locks": 1, "expired_waiters": 1, "expired_jobs": 2, "expired_cron_runs": 0}`, out)
	out, _, _ = pglockctl(t, ctx, d.URL(), "gc")
	require.Equal(t, "deleted 0 expired locks, 0 expired waiter places, 0 expired job records and 0 cron runs past retention\n", out)
}

// Without --database-url, DATABASE_URL is used, and without it the libpq PG* variables.
func TestConnectionFromTheEnvironment(t *testing.T) {
	d := testdb.New(t, nil) // before the environment changes: the harness has found its server
	config, err := pgxpool.ParseConfig(d.URL())
	require.NoError(t, err)
	for _, env := range []map[string]string{
		{"DATABASE_URL": d.URL()},
		{"DATABASE_URL": "", "PGHOST": config.ConnConfig.Host, "PGPORT": fmt.Sprint(config.ConnConfig.Port),
			"PGUSER": config.ConnConfig.User, "PGDATABASE": config.ConnConfig.Database, "PGSSLMODE": "disable"},
	} {
		for k, v := range env {
			t.Setenv(k, v)
		}
		var out, errs bytes.Buffer
		require.Equal(t, exitOK, run(context.Background(), []string{"migrate", "status"}, &out, &errs), errs.String())
		require.Contains(t, out.String(), fmt.Sprintf("version  %d of %d", migrations.Latest(), migrations.Latest()))
	}
}
