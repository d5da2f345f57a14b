// Command bench is `make bench`: pglock measured side by side with raw SQL, the seed design it
// grew from, cirello.io/pglock, bsm/redislock and go-redsync/redsync (beside pglock's own Redis
// Lockers), in one run, interleaved round by round so the
// noise of a shared machine falls on every column alike. It writes docs/benchmarks.md and its
// charts. It is a module of its own so that peers never enter the library's dependency graph.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/containerdb"
	"github.com/pglock/pglock/internal/testdb"
)

// env is what every scenario runs against.
type env struct {
	url          string        // the benchmark database's
	admin        *pgxpool.Pool // a pool on it, for set-up and reading
	redisAddr    string        // "" when no Redis could be had
	redisOwned   bool          // started by the benchmark
	redlockAddrs []string      // the Redlock designs' servers; none without redis-server
	designs      []design      // in the report's order, raw SQL first
	notes        []string      // what was left out, and why
}

// newPool opens a pool of its own, an instance, on url with at most maxConns connections.
func newPool(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	config.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, config)
}

func main() {
	out := flag.String("out", "../docs", "where benchmarks.md and its charts go")
	only := flag.String("only", "", "run only the scenarios whose names contain one of these (comma-separated), and print their tables instead of writing the page")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *out, *only); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out, only string) error {
	began := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("bench %5.1fs: %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	e := &env{designs: []design{rawSQL, tablelockDesign, advisoryDesign, seedDesign}}
	if cirelloDesign != nil {
		e.designs = append(e.designs, *cirelloDesign)
	} else {
		e.notes = append(e.notes, "cirello.io/pglock is left out: this run was built without its source (the module proxy does not serve it; `make bench` unpacks it from a clone named by PGLOCK_CIRELLO_GIT).")
	}
	addr, owned, stopRedis, err := findRedis(ctx)
	if err != nil {
		e.notes = append(e.notes, fmt.Sprintf("bsm/redislock is left out: %v.", err))
	} else {
		defer stopRedis()
		e.redisAddr, e.redisOwned = addr, owned
		e.designs = append(e.designs, redisDesign, pglockRedisDesign)
	}
	if addrs, stopNodes, err := startRedlockNodes(ctx); err != nil {
		e.notes = append(e.notes, fmt.Sprintf("The Redlock designs (pglock's and redsync) are left out: %v.", err))
	} else {
		defer stopNodes()
		e.redlockAddrs = addrs
		e.designs = append(e.designs, pglockRedlockDesign, redsyncDesign)
	}

	say("finding PostgreSQL (PGLOCK_TEST_DATABASE_URL or DATABASE_URL, local binaries, or Docker)")
	d, done, err := testdb.Throwaway(ctx, containerdb.Fallback)
	if err != nil {
		return err
	}
	defer done()
	e.url, e.admin = d.URL(), d.Pool
	if _, err := d.Pool.Exec(ctx, seedSchema); err != nil {
		return fmt.Errorf("installing the seed design: %w", err)
	}
	m, err := describeMachine(ctx, e)
	if err != nil {
		return err
	}
	r := &report{machine: m, notes: e.notes, designs: e.designs}
	for _, s := range []struct {
		name string
		run  func(context.Context, *env, *report, func(string, ...any)) error
	}{
		{"uncontended acquire and release", uncontended},
		{"a failed try on a held lock", failedTry},
		{"4-way contended handoff", handoff},
		{"acquire among 1k and 1M live locks", manyLocks},
		{"1,000 waiters in one process", thousandWaiters},
		{"deduplicated delivery", dedup},
		{"leases held by one process", leases},
		{"runtime schedules across three instances", runtimeSchedules},
	} {
		if only != "" && !slices.ContainsFunc(strings.Split(only, ","), func(part string) bool { return strings.Contains(s.name, part) }) {
			continue
		}
		say("%s", s.name)
		if err := s.run(ctx, e, r, say); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if r.figures != nil {
		r.sideBySide()
	}
	r.notes = append(r.notes, r.peerNotes()...)
	if pollFailures.n > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d of the seed design's polls failed and were retried, the first with: %v.", pollFailures.n, pollFailures.first))
	}
	r.elapsed = time.Since(began)
	if only != "" {
		fmt.Println(strings.Join(r.sections, "\n"))
		return nil
	}
	if err := r.write(out); err != nil {
		return err
	}
	say("wrote %s", filepath.Join(out, "benchmarks.md"))
	return nil
}

// machine is what the report says the figures were measured on.
type machine struct {
	cpu, kernel, postgres, redis, goVersion, commit, date, libraries string
	cores                                                            int
}

func describeMachine(ctx context.Context, e *env) (machine, error) {
	m := machine{cores: runtime.NumCPU(), goVersion: runtime.Version(), date: time.Now().UTC().Format("2006-01-02 15:04 UTC")}
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(info)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				m.cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	if release, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = "Linux " + strings.TrimSpace(string(release))
	}
	var version, fsync, syncCommit, sharedBuffers, maxConnections string
	if err := e.admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers'), current_setting('max_connections')`).
		Scan(&version, &fsync, &syncCommit, &sharedBuffers, &maxConnections); err != nil {
		return m, err
	}
	m.postgres = fmt.Sprintf("%s (fsync %s, synchronous_commit %s, shared_buffers %s, max_connections %s)",
		version, fsync, syncCommit, sharedBuffers, maxConnections)
	m.libraries = libraryVersions()
	if e.redisAddr != "" {
		m.redis = describeRedis(ctx, e.redisAddr, e.redisOwned)
	}
	if len(e.redlockAddrs) > 0 {
		m.redis += "; Redlock: " + describeRedlockNodes(ctx, e.redlockAddrs)
	}
	m.commit = gitCommit()
	return m, nil
}

// libraryVersions lists the versions of the libraries measured, as this binary was built with
// them.
func libraryVersions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var out []string
	for _, dep := range info.Deps {
		switch dep.Path {
		case "github.com/jackc/pgx/v5", "github.com/bsm/redislock", "github.com/redis/go-redis/v9", "github.com/lib/pq",
			"github.com/go-redsync/redsync/v4", "github.com/riverqueue/river":
			out = append(out, dep.Path+" "+dep.Version)
		}
	}
	if cirelloDesign != nil {
		out = append(out, "cirello.io/pglock "+cirelloCommit())
	}
	return strings.Join(out, ", ")
}

// gitCommit names the commit measured, marked dirty when the work tree has changes.
func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
