package migrations_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// v010 is the commit released as v0.1.0.
const v010 = "c68bc43"

// Instances built from v0.1.0's code hold a lock, take and release others, run jobs inside
// transactions and a schedule every second, and go on while this tree's migrations are applied
// under them and an instance built from this tree joins them. Nothing is lost: the lock held
// across the upgrade is still held under its token, no loss is signalled, every job's effect and
// every tick's is written once, every lock's tokens grow, and the old instances keep working
// against the new functions.
func TestUpgradeUnderRunningInstancesLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	oldWorker, newWorker := buildWorkers(t)
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	out, err := exec.Command(oldWorker, "-migrate", "-url", d.URL()).CombinedOutput()
	require.NoError(t, err, "v0.1.0 installs its own SQL: %s", out)
	status, err := migrations.Version(ctx, d.Pool)
	require.NoError(t, err)
	require.Equal(t, uint(1), status.Version)
	execSQL(t, d.Pool, `CREATE TABLE upgrade_effects (instance text NOT NULL, kind text NOT NULL, key text NOT NULL,
		token bigint, at timestamptz NOT NULL DEFAULT clock_timestamp())`)

	workers := []*workerProcess{startWorker(t, oldWorker, d.URL(), "old-a"), startWorker(t, oldWorker, d.URL(), "old-b")}
	waitForEffects(t, d.Pool, "", "tick", 2)
	for _, w := range workers {
		waitForEffects(t, d.Pool, w.name, "job", 5)
	}
	var heldToken int64
	var holder string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT fencing_token, holder_id FROM distributed_locks WHERE lock_name = 'lock-0'`).Scan(&heldToken, &holder))

	var upgradedAt time.Time
	require.NoError(t, migrations.Up(ctx, d.Pool))
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&upgradedAt))
	requireUpToDate(t, d.Pool)
	workers = append(workers, startWorker(t, newWorker, d.URL(), "new"))

	// Every instance keeps working: each runs jobs and takes locks after the upgrade, and ticks go on.
	waitForEffects(t, d.Pool, "", "tick", 3, upgradedAt)
	for _, w := range workers {
		waitForEffects(t, d.Pool, w.name, "job", 5, upgradedAt)
		waitForEffects(t, d.Pool, w.name, "lock", 1, upgradedAt)
	}
	var token int64
	var stillHolder string
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT fencing_token, holder_id FROM distributed_locks WHERE lock_name = 'lock-0'`).Scan(&token, &stillHolder))
	require.Equal(t, []any{heldToken, holder}, []any{token, stillHolder}, "lock-0 is held across the upgrade, under its token")

	for _, w := range workers {
		w.stop(t)
	}
	for _, w := range workers {
		require.NotContains(t, w.output(), "LOST", "%s was told of no loss", w.name)
		for _, level := range []string{" WARN ", " ERROR "} {
			require.NotContains(t, w.output(), level, "%s logged no failure (a call the new functions refused, say)", w.name)
		}
	}
	requireNone(t, d.Pool, "a job's effect written twice", `SELECT key FROM upgrade_effects WHERE kind = 'job' GROUP BY key HAVING count(*) > 1`)
	requireNone(t, d.Pool, "a tick run twice", `SELECT key FROM upgrade_effects WHERE kind = 'tick' GROUP BY key HAVING count(*) > 1`)
	requireNone(t, d.Pool, "a token handed out twice", `SELECT kind || ' ' || token FROM upgrade_effects WHERE kind IN ('lock', 'tick') GROUP BY kind, token HAVING count(*) > 1`)
	requireNone(t, d.Pool, "a lock's token smaller than its previous holder's", `
		SELECT key FROM (SELECT key, token, lag(token) OVER (PARTITION BY key ORDER BY at) AS previous
		                   FROM upgrade_effects WHERE kind = 'lock') e
		 WHERE token <= previous`)
}

// buildWorkers builds migrations/testdata/upgradeworker twice: in a copy of v0.1.0's tree (git
// archive of the commit), and in this one.
func buildWorkers(t *testing.T) (oldWorker, newWorker string) {
	t.Helper()
	git, goTool := requireTool(t, "git"), requireTool(t, "go")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	if out, err := exec.Command(git, "-C", root, "cat-file", "-e", v010+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("v0.1.0 (%s) is not in this checkout's history (a shallow clone?): %v %s", v010, err, out)
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "v0.1.0")
	require.NoError(t, os.Mkdir(tree, 0o755))
	archive := exec.Command("sh", "-c", `"$0" -C "$1" archive "$2" | tar -x -C "$3"`, git, root, v010, tree)
	out, err := archive.CombinedOutput()
	require.NoError(t, err, "%s", out)
	source, err := os.ReadFile(filepath.Join("testdata", "upgradeworker", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(tree, "internal", "upgradeworker"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tree, "internal", "upgradeworker", "main.go"), source, 0o644))

	oldWorker, newWorker = filepath.Join(dir, "old"), filepath.Join(dir, "new")
	for _, build := range []struct{ dir, pkg, out string }{
		{tree, "./internal/upgradeworker", oldWorker},
		{root, "./migrations/testdata/upgradeworker", newWorker},
	} {
		cmd := exec.Command(goTool, "build", "-o", build.out, build.pkg)
		cmd.Dir = build.dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "building %s in %s: %s", build.pkg, build.dir, out)
	}
	return oldWorker, newWorker
}

type workerProcess struct {
	name   string
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{} // closed once Wait returned, with err
	err    error
}

func startWorker(t *testing.T, binary, url, name string) *workerProcess {
	t.Helper()
	w := &workerProcess{name: name, cmd: exec.Command(binary, "-url", url, "-name", name), exited: make(chan struct{})}
	w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
	require.NoError(t, w.cmd.Start())
	go func() { w.err = w.cmd.Wait(); close(w.exited) }()
	t.Cleanup(func() {
		select {
		case <-w.exited:
		default:
			w.cmd.Process.Kill()
			<-w.exited
		}
	})
	return w
}

// stop sends SIGTERM and waits for the worker to release what it holds and exit cleanly.
func (w *workerProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	testdb.Receive(t, w.exited)
	require.NoError(t, w.err, "%s: %s", w.name, w.out.String())
}

// output is what the worker printed; read it once the worker has exited.
func (w *workerProcess) output() string { return w.out.String() }

// waitForEffects waits until instance ("" for any) has written n effects of kind, since after
// (if given).
func waitForEffects(t *testing.T, pool *pgxpool.Pool, instance, kind string, n int, after ...time.Time) {
	t.Helper()
	since := time.Time{}
	if len(after) > 0 {
		since = after[0]
	}
	testdb.WaitFor(t, func() bool {
		var count int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM upgrade_effects
			WHERE kind = $1 AND ($2 = '' OR instance = $2) AND at > $3`, kind, instance, since).Scan(&count)
		return err == nil && count >= n
	}, "%d effects of kind %s by %q since %s", n, kind, instance, since)
}

func requireNone(t *testing.T, pool *pgxpool.Pool, what, query string) {
	t.Helper()
	rows, err := pool.Query(context.Background(), query)
	require.NoError(t, err)
	var found []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		found = append(found, s)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, found, "%s: %s", what, strings.Join(found, ", "))
}
