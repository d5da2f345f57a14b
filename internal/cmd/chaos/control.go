package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// Fault kinds, as the summary names them.
const (
	faultTerminate = "terminate"
	faultPartition = "partition"
	faultLatency   = "latency"
	faultKill      = "kill-9"
	faultPause     = "pause"
	faultRestart   = "restart"
)

// faultKinds are every kind of fault, in the order the summary lists them: the restart, which
// comes on a schedule, last.
var faultKinds = []string{faultTerminate, faultPartition, faultLatency, faultPause, faultKill, faultRestart}

// restartEvery is how often PostgreSQL is restarted in immediate mode (the first time after
// half of it).
const restartEvery = 25 * time.Second

// quietSpell is how long the workers run without faults at the end: more than a lease (3 s), a
// scheduler's poll (2 s) and a pool's reconnection.
const quietSpell = 8 * time.Second

// mark records on the database's clock that the run reached a point the checker refers to.
func mark(ctx context.Context, admin *pgxpool.Pool, what string) error {
	_, err := admin.Exec(ctx, `INSERT INTO chaos_marks (mark) VALUES ($1)`, what)
	return err
}

// workerProc is a worker process and the proxy every connection of it passes through.
type workerProc struct {
	id          int
	incarnation int
	proxy       *testdb.Proxy
	cmd         *exec.Cmd
	exited      chan struct{}
	killed      bool // by the controller: its exit is expected
	busy        bool // a partition or latency is on its proxy
}

// controller runs the workers and injects the faults.
type controller struct {
	cluster *testdb.Cluster // chaos's; nil under Patroni
	url     string          // under Patroni: the workers connect to it, through no proxy
	logDir  string
	rng     *rand.Rand

	mu       sync.Mutex
	workers  []*workerProc
	faults   map[string]int
	failures []string // the suite's own: a worker that exited on its own, a fault it could not undo
	stopped  bool
	verbose  bool
	began    time.Time
	pending  sync.WaitGroup
}

func control(duration time.Duration, workers int, seed uint64, verbose bool) int {
	began := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 1
	}
	// The suite restarts PostgreSQL, so it needs a cluster of its own: never a shared server.
	cluster, err := testdb.StartCluster(ctx)
	if err != nil {
		return fail(fmt.Errorf("a cluster of its own (PostgreSQL's initdb and postgres, on PATH or where packages put them): %w", err))
	}
	defer cluster.Remove()
	logDir, err := os.MkdirTemp("", "pglock-chaos-")
	if err != nil {
		return fail(err)
	}
	c := &controller{cluster: cluster, logDir: logDir, rng: rand.New(rand.NewPCG(seed, seed)), faults: map[string]int{}, verbose: verbose, began: began}
	admin, err := c.setUp(ctx, cluster.URL(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d/chaos?sslmode=disable", cluster.Port()))
	if err != nil {
		return fail(err)
	}
	defer admin.Close()
	defer c.stopWorkers()
	if err := c.startWorkers(workers); err != nil {
		return fail(err)
	}
	fmt.Printf("chaos: %d workers on PostgreSQL at port %d, faults for %s (seed %d; logs in %s)\n", workers, cluster.Port(), duration, seed, logDir)

	c.injectFaults(ctx, admin, duration)
	settled := make(chan struct{})
	go func() { c.pending.Wait(); close(settled) }() // partitions healed, workers resumed and back
	select {
	case <-settled:
	case <-time.After(30 * time.Second):
		return fail(errors.New("the last faults were not undone within 30 s"))
	}
	// A quiet spell: every workload must recover from the last fault (leases run out, pools
	// reconnect, schedulers catch up), and the checker asks for work done in it.
	if err := mark(ctx, admin, "faults_ended"); err != nil {
		return fail(err)
	}
	time.Sleep(quietSpell)
	if err := mark(ctx, admin, "stopping"); err != nil {
		return fail(err)
	}
	stopping := time.Now()
	c.stopWorkers()
	if err := mark(ctx, admin, "stopped"); err != nil {
		return fail(err)
	}
	if c.verbose {
		fmt.Printf("chaos %6.1fs: workers stopped in %s\n", time.Since(began).Seconds(), time.Since(stopping).Round(time.Millisecond))
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}

	s, err := check(ctx, admin)
	if err != nil {
		return fail(fmt.Errorf("checking the evidence: %w", err))
	}
	s.name, s.kinds = "chaos", faultKinds
	c.fill(s, workers)
	return c.report(s, s.ok())
}

// fill gives s the run's figures: what ok weighs, and line prints.
func (c *controller) fill(s *summary, workers int) {
	s.elapsed, s.workers, s.faults, s.failures = time.Since(c.began), workers, c.faults, c.failures
}

// report prints s's line and details, and returns the exit status: 1 unless passed; the
// workers' logs are kept when it failed or when asked.
func (c *controller) report(s *summary, passed bool) int {
	fmt.Println(s.line())
	for _, v := range s.details {
		fmt.Println("  " + v)
	}
	if !passed {
		return 1
	}
	if !c.verbose {
		os.RemoveAll(c.logDir)
	}
	return 0
}

// setUp makes the chaos database through rootURL, migrated, with the evidence tables, and
// returns a pool on it (at chaosURL).
func (c *controller) setUp(ctx context.Context, rootURL, chaosURL string) (*pgxpool.Pool, error) {
	root, err := pgxpool.New(ctx, rootURL)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if _, err := root.Exec(ctx, "CREATE DATABASE chaos"); err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, chaosURL)
	if err != nil {
		return nil, err
	}
	if err := migrations.Up(ctx, admin); err != nil {
		admin.Close()
		return nil, err
	}
	if _, err := admin.Exec(ctx, evidenceSchema); err != nil {
		admin.Close()
		return nil, err
	}
	return admin, nil
}

// startWorkers starts the first incarnation of workers 1 to n.
func (c *controller) startWorkers(n int) error {
	for i := range n {
		if err := c.startWorker(i+1, 0); err != nil {
			return err
		}
	}
	return nil
}

// startWorker starts incarnation n of worker id, through a proxy of its own (made on its first
// start).
func (c *controller) startWorker(id, incarnation int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped { // a killed worker's restart, come too late
		return nil
	}
	var w *workerProc
	if id <= len(c.workers) {
		w = c.workers[id-1]
	} else {
		w = &workerProc{id: id}
		if c.cluster != nil {
			proxy, err := testdb.NewProxy(c.cluster.Addr())
			if err != nil {
				return err
			}
			w.proxy = proxy
		}
		c.workers = append(c.workers, w)
	}
	name := fmt.Sprintf("w%d.%d", id, incarnation)
	logFile, err := os.Create(filepath.Join(c.logDir, name+".log"))
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		logFile.Close()
		return err
	}
	cmd := exec.Command(self)
	// connect_timeout, as any deployment should have: a connection opened while a partition
	// drops packets would otherwise wait for its server's answer for ever.
	url := c.url + fmt.Sprintf("&application_name=chaos-w%d", id)
	if w.proxy != nil {
		url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/chaos?sslmode=disable&application_name=chaos-w%d&connect_timeout=5", w.proxy.Port, id)
	}
	cmd.Env = append(os.Environ(), workerEnv+"="+name, "DATABASE_URL="+url)
	if c.cluster == nil { // make ha: what the worker is told, to check against the new primary
		cmd.Env = append(cmd.Env, ledgerEnv+"="+filepath.Join(c.logDir, name+".ledger"))
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A worker dies with the controller: none is left behind, frozen or retrying a cluster
	// that is gone.
	exitedNow, err := testdb.StartChild(cmd)
	if err != nil {
		logFile.Close()
		return err
	}
	w.incarnation, w.cmd, w.killed, w.exited = incarnation, cmd, false, make(chan struct{})
	go func(w *workerProc, cmd *exec.Cmd, exited chan struct{}) {
		<-exitedNow
		logFile.Close()
		c.mu.Lock()
		if !w.killed {
			c.failures = append(c.failures, fmt.Sprintf("worker %s exited on its own (%v); see %s", name, cmd.ProcessState, logFile.Name()))
		}
		c.mu.Unlock()
		close(exited)
	}(w, cmd, w.exited)
	return nil
}

// stopWorkers asks every worker to stop (SIGTERM), and kills those still running after 20 s
// (pgx gives a connection's cancel request 15 s when it closes a connection stuck behind a
// partition).
func (c *controller) stopWorkers() {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	c.stopped = true
	workers := append([]*workerProc(nil), c.workers...)
	for _, w := range workers {
		if !w.killed {
			w.killed = true
			w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	c.mu.Unlock()
	expired := make(chan struct{})
	time.AfterFunc(20*time.Second, func() { close(expired) })
	for _, w := range workers {
		select {
		case <-w.exited:
		case <-expired:
			w.cmd.Process.Kill()
			<-w.exited
			if c.cluster == nil { // make ha: its ledger may miss what it was told last
				c.fail(fmt.Sprintf("worker %d did not stop within 20 s", w.id))
			}
		}
	}
	for _, w := range workers {
		if w.proxy != nil {
			w.proxy.Close()
		}
	}
}

// injectFaults injects a fault every 0.3–1.5 s until duration has passed: each kind until it
// has been injected once first (a kill-9 is skipped while its worker is busy or down), then at
// random, PostgreSQL's restart every restartEvery.
func (c *controller) injectFaults(ctx context.Context, admin *pgxpool.Pool, duration time.Duration) {
	kinds := faultKinds[:len(faultKinds)-1]
	weights := []int{35, 20, 10, 20, 15}
	end := time.Now().Add(duration)
	nextRestart := time.Now().Add(restartEvery / 2)
	for time.Now().Before(end) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300*time.Millisecond + time.Duration(c.rng.Int64N(int64(1200*time.Millisecond)))):
		}
		if time.Now().After(nextRestart) {
			c.restart(ctx)
			nextRestart = time.Now().Add(restartEvery)
			continue
		}
		kind := c.owed(kinds)
		if kind == "" {
			kind = pick(c.rng, kinds, weights)
		}
		c.inject(ctx, admin, kind)
	}
}

// owed is the first of kinds not injected yet, or "".
func (c *controller) owed(kinds []string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, kind := range kinds {
		if c.faults[kind] == 0 {
			return kind
		}
	}
	return ""
}

func pick(rng *rand.Rand, kinds []string, weights []int) string {
	total := 0
	for _, w := range weights {
		total += w
	}
	r := rng.IntN(total)
	for i, w := range weights {
		if r < w {
			return kinds[i]
		}
		r -= w
	}
	return kinds[len(kinds)-1]
}

// inject injects one fault of kind, counting it if it was injected.
func (c *controller) inject(ctx context.Context, admin *pgxpool.Pool, kind string) {
	c.mu.Lock()
	w := c.workers[c.rng.IntN(len(c.workers))]
	duration := time.Second + time.Duration(c.rng.Int64N(int64(5*time.Second))) // past lockTTL at times: locks are lost
	latency := 50 + c.rng.IntN(2000)
	c.mu.Unlock()
	switch kind {
	case faultTerminate:
		// A few of the workers' backends, whatever they are doing: a session's lock, a
		// listener, a transaction between its fence and its commit.
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'chaos-w%' ORDER BY random() LIMIT 1 + (random() * 3)::int) b`).Scan(&n); err != nil || n == 0 {
			return
		}
	case faultPartition:
		if !c.disturb(w, kind, duration, func(*os.Process) (func() error, error) { return w.proxy.Partition() }) {
			return
		}
	case faultLatency:
		if !c.disturb(w, kind, duration, func(*os.Process) (func() error, error) { return w.proxy.Slow(latency, latency/4) }) {
			return
		}
	case faultPause:
		// A process frozen (a long GC pause, a VM migrated) while its locks' leases run out,
		// which then carries on as if it still held them: what fencing is for. A worker that
		// has just exited cannot be stopped: no fault then.
		if !c.disturb(w, kind, duration, func(p *os.Process) (func() error, error) {
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				return nil, nil
			}
			return func() error { return p.Signal(syscall.SIGCONT) }, nil
		}) {
			return
		}
	case faultKill:
		c.mu.Lock()
		if w.killed || w.busy {
			c.mu.Unlock()
			return
		}
		w.killed = true
		w.cmd.Process.Kill()
		id, next, exited := w.id, w.incarnation+1, w.exited
		c.mu.Unlock()
		c.pending.Go(func() {
			<-exited
			time.Sleep(500 * time.Millisecond)
			if err := c.startWorker(id, next); err != nil {
				c.fail(fmt.Sprintf("restarting worker %d: %v", id, err))
			}
		})
	}
	c.count(kind, fmt.Sprintf("worker %d", w.id))
}

// disturb applies a fault to worker w that lasts for duration, unless w is already disturbed or
// killed, and undoes it after. apply returns how to undo it, or none when there was nothing to
// disturb. It reports whether the fault was applied.
func (c *controller) disturb(w *workerProc, kind string, duration time.Duration, apply func(*os.Process) (undo func() error, err error)) bool {
	c.mu.Lock()
	if w.busy || w.killed {
		c.mu.Unlock()
		return false
	}
	w.busy = true
	process := w.cmd.Process
	c.mu.Unlock()
	undo, err := apply(process)
	if err != nil {
		c.fail(fmt.Sprintf("%s of worker %d: %v", kind, w.id, err))
	}
	if undo == nil {
		c.setBusy(w, false)
		return false
	}
	c.pending.Go(func() {
		time.Sleep(duration)
		if err := undo(); err != nil {
			c.fail(fmt.Sprintf("undoing the %s of worker %d: %v", kind, w.id, err))
		}
		c.setBusy(w, false)
	})
	return true
}

// fail records a failure of the suite itself: the run cannot pass.
func (c *controller) fail(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, what)
}

func (c *controller) setBusy(w *workerProc, busy bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w.busy = busy
}

// count counts a fault injected, and logs it when asked to.
func (c *controller) count(kind, detail string) {
	c.mu.Lock()
	c.faults[kind]++
	c.mu.Unlock()
	if c.verbose {
		fmt.Printf("chaos %6.1fs: %s %s\n", time.Since(c.began).Seconds(), kind, detail)
	}
}

// restart crashes PostgreSQL (an immediate shutdown: no checkpoint, every connection cut) and
// starts it again, which recovers from the WAL.
func (c *controller) restart(ctx context.Context) {
	if err := c.cluster.Crash(); err != nil {
		c.fail(fmt.Sprintf("crashing PostgreSQL: %v", err))
	}
	time.Sleep(300 * time.Millisecond)
	if err := c.cluster.Start(ctx); err != nil {
		c.fail(fmt.Sprintf("restarting PostgreSQL: %v", err))
		return
	}
	c.count(faultRestart, "PostgreSQL")
}
