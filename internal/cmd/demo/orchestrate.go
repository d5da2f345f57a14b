package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/containerdb"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
)

const (
	workers   = 3
	jobCount  = 100
	sceneTime = 24 * time.Second // cron ticks for this long; the resign comes at a third, the kill at two thirds
)

const schema = `
CREATE TABLE demo_effects (job int NOT NULL, worker int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE demo_ticks (tick timestamptz NOT NULL, worker int NOT NULL, token bigint NOT NULL);
CREATE TABLE demo_deliveries (job int NOT NULL, worker int NOT NULL, outcome text NOT NULL);
CREATE TABLE demo_events (kind text NOT NULL, worker int NOT NULL, term bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE demo_reconcile (id bigserial PRIMARY KEY, term bigint NOT NULL, worker int NOT NULL);`

// workerProc is a running worker process and the pipe that feeds it commands.
type workerProc struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dead  bool
}

func orchestrate() int {
	began := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	interrupted := ctx
	say := newProgress(os.Stdout)

	say.line("pglock demo: finding PostgreSQL (DATABASE_URL, local binaries, or Docker)…")
	d, done, err := testdb.Throwaway(ctx, containerdb.Fallback)
	if errors.Is(err, testdb.ErrNoServer) {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	defer done()
	pool := d.Pool
	if _, err := pool.Exec(ctx, schema); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	say.line(fmt.Sprintf("pglock demo: database ready and migrated in %s; starting %d worker processes", time.Since(began).Round(100*time.Millisecond), workers))

	addrs, err := metricsAddrs(workers)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	procs, err := startWorkers(d.URL(), addrs)
	defer func() {
		for _, p := range procs {
			if !p.dead {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	for i, addr := range addrs {
		say.line(fmt.Sprintf("pglock demo: worker %d serves its metrics at http://%s/metrics while the scene runs", i+1, addr))
	}
	consoleAddr, stopConsole, err := serveConsole(pool)
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		return 1
	}
	defer stopConsole()
	say.line(fmt.Sprintf("pglock demo: the console, read-only, at http://%s/ while the scene runs", consoleAddr))
	deliveries := broker(procs)
	say.line(fmt.Sprintf("pglock demo: a broker delivers %d jobs %d times in all (each at least twice, to random workers)", jobCount, deliveries))

	// The scene must end in time: a worker that hangs fails the demo rather than stalling it.
	ctx, cancel := context.WithTimeout(ctx, sceneTime+30*time.Second)
	defer cancel()
	event(ctx, pool, "scene-start", 0, 0) // a moment of the scene, by the database's clock
	sceneStart := time.Now()
	resigned, killed := false, false
	for elapsed := time.Duration(0); elapsed < sceneTime; elapsed = time.Since(sceneStart) {
		if ctx.Err() != nil {
			return 1
		}
		switch {
		case !resigned && elapsed >= sceneTime/3:
			resigned = true
			p, _, err := leading(ctx, pool, procs)
			if err != nil {
				fmt.Fprintf(os.Stderr, "demo: %v\n", err)
				return 1
			}
			fmt.Fprintln(p.stdin, "resign")
		case !killed && elapsed >= 2*sceneTime/3:
			killed = true
			if err := killLeader(ctx, pool, procs); err != nil {
				fmt.Fprintf(os.Stderr, "demo: %v\n", err)
				return 1
			}
		}
		say.status(ctx, pool, elapsed, sceneTime)
		time.Sleep(250 * time.Millisecond)
	}
	event(ctx, pool, "scene-end", 0, 0)
	// The last tick due by the scene's end runs before the workers stop: a loaded machine can
	// claim it a little late. Bounded: the check reports a tick that never ran.
	for waited := time.Now(); time.Since(waited) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		var ran bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM demo_ticks WHERE tick = to_timestamp(
			floor(extract(epoch FROM (SELECT at FROM demo_events WHERE kind = 'scene-end')) / 2) * 2))`).Scan(&ran)
		if err != nil || ran {
			break
		}
	}
	// What an operator would see while the workers run.
	views := pglockctl(d.URL(), []string{"list"}, []string{"cron", "list"}, []string{"leader", "list"})
	metrics := metricsReport(ctx, addrs, procs)
	if os.Getenv("DEMO_HOLD") == "1" {
		say.line(fmt.Sprintf("pglock demo: DEMO_HOLD=1: the workers and the console (http://%s/) keep running; Ctrl-C to end", consoleAddr))
		<-interrupted.Done()
		// The scene's deadline has long passed, and Ctrl-C ended the rest: the shutdown and the
		// checks get a deadline of their own.
		var cancelShutdown context.CancelFunc
		ctx, cancelShutdown = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancelShutdown()
	}
	for _, p := range procs {
		if !p.dead {
			p.stdin.Close() // the worker stops its scheduler and exits
		}
	}
	for _, p := range procs {
		if !p.dead {
			exited := make(chan error, 1)
			go func() { exited <- p.cmd.Wait() }()
			select {
			case err := <-exited:
				p.dead = true
				if err != nil {
					fmt.Fprintf(os.Stderr, "demo: a worker failed: %v\n", err)
					return 1
				}
			case <-ctx.Done():
				fmt.Fprintln(os.Stderr, "demo: a worker did not stop in time")
				return 1
			}
		}
	}
	say.done()

	summary, ok := check(ctx, pool, deliveries)
	fmt.Println(summary)
	fmt.Print(views)
	fmt.Print(metrics)
	fmt.Printf("pglock demo: %s in %s\n", map[bool]string{true: "passed", false: "FAILED"}[ok], time.Since(began).Round(100*time.Millisecond))
	if !ok {
		return 1
	}
	return 0
}

func startWorkers(url string, metricsAddrs []string) ([]*workerProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*workerProc
	for i := range workers {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", workerEnv, i+1), "DATABASE_URL="+url, metricsEnv+"="+metricsAddrs[i])
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, err
		}
		procs = append(procs, &workerProc{id: i + 1, cmd: cmd, stdin: stdin})
	}
	return procs, nil
}

// broker delivers each job two or three times, each time to a random worker, in random order,
// and returns how many deliveries it made.
func broker(procs []*workerProc) int {
	var deliveries [][2]int // job, worker
	for job := 1; job <= jobCount; job++ {
		for range 2 + rand.IntN(2) {
			deliveries = append(deliveries, [2]int{job, rand.IntN(len(procs))})
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	for _, dl := range deliveries {
		fmt.Fprintf(procs[dl[1]].stdin, "job %d\n", dl[0])
	}
	return len(deliveries)
}

// killLeader kills the leading worker's process with SIGKILL, as a crash would, in the middle
// of a 2 s cron interval by the database's clock (so that no tick is cut in half), and records
// when.
func killLeader(ctx context.Context, pool *pgxpool.Pool, procs []*workerProc) error {
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return err
	}
	into := time.Duration(now.UnixNano()) % (2 * time.Second)
	time.Sleep((3*time.Second - into) % (2 * time.Second))
	p, l, err := leading(ctx, pool, procs)
	if err != nil {
		return err
	}
	// A loaded machine can start a tick's run late, into the middle of the interval: the scene
	// kills a leader between runs, not one in the middle of its tick (which would be that
	// tick's loss, as at most once has it, and no demonstration of anything).
	for waited := time.Now(); time.Since(waited) < time.Second; time.Sleep(20 * time.Millisecond) {
		var running bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pglock_cron_runs WHERE status = 'running' AND instance = $1)`,
			l.Instance).Scan(&running)
		if err != nil || !running {
			break
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.cmd.Wait()
	p.dead = true
	_, err = pool.Exec(ctx, `INSERT INTO demo_events (kind, worker, term) VALUES ('killed', $1, $2)`, p.id, l.Term)
	return err
}

// leading returns the worker that leads the election.
func leading(ctx context.Context, pool *pgxpool.Pool, procs []*workerProc) (*workerProc, leader.Leader, error) {
	l, err := leader.Current(ctx, pool, election)
	if err != nil {
		return nil, l, fmt.Errorf("find the leader: %w", err)
	}
	var worker int
	if _, err := fmt.Sscanf(l.Instance, "demo-w%d@", &worker); err != nil || worker < 1 || worker > len(procs) {
		return nil, l, fmt.Errorf("leader %q is not a demo worker", l.Instance)
	}
	return procs[worker-1], l, nil
}

// pglockctl returns its view of the database for each command line, as an operator would see
// it.
func pglockctl(url string, commands ...[]string) string {
	self, _ := os.Executable()
	bin := filepath.Join(filepath.Dir(self), "pglockctl")
	var out strings.Builder
	for _, args := range commands {
		fmt.Fprintf(&out, "\n$ pglockctl %s\n", strings.Join(args, " "))
		cmd := exec.Command(bin, append([]string{"--database-url", url}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(&out, "(pglockctl: %v; make demo builds it next to the demo)\n", err)
		}
	}
	return out.String()
}
