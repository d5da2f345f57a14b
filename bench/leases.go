package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/tablelock"
)

// The lease-scale scenario: one process takes n leases, leaseAcquirers at a time on a pool of
// leaseConns, and holds them; v0.1's way of keeping them (a statement per lease per heartbeat)
// beside pglock's (every lease due in one statement per tick).
var (
	leaseSizes  = flag.String("lease-sizes", "1000,10000,30000,100000", "how many leases one process holds, comma-separated")
	leaseHold   = flag.Duration("lease-hold", 20*time.Second, "how long each size is held")
	leaseTTL    = flag.Duration("lease-ttl", 6*time.Second, "the leases' TTL (renewed every third of it)")
	leaseBefore = flag.Bool("lease-before", true, "measure v0.1's way (a statement per lease) too")
)

const (
	leaseAcquirers = 16
	leaseConns     = 10
	// leaseAcquireBudget bounds taking the leases: past it, what was taken is held and the
	// row says the rest was not.
	leaseAcquireBudget = 90 * time.Second
)

// leaseWay is one way for a process to hold many leases.
type leaseWay struct {
	name string
	// hold takes n leases named prefix:i, calls held once they are taken (or the budget ran
	// out), and keeps them until ctx ends; then it reports how many it took and lost.
	hold func(ctx context.Context, pool *pgxpool.Pool, prefix string, n int, held func(taken int)) (taken, lost int, err error)
	// try is one acquisition and release of a free name, on the same pool.
	try func(ctx context.Context, name string) error
}

// leaseResult is what one way measured holding n leases.
type leaseResult struct {
	way        string
	leases     int
	taken      int
	acquireAll time.Duration
	refused    int64 // acquisitions refused with pglock.ErrSaturated while taking them, and tried again
	lost       int
	txPerSec   float64 // the database's transactions per second while holding, probes aside
	dbCPU      float64 // PostgreSQL's processes' CPU while holding, in cores
	tryP50     time.Duration
	// probesRefused counts the probes refused with pglock.ErrSaturated (each tried again 50 ms
	// later): how often, while holding, the renewals were more than half a heartbeat behind.
	probesRefused int
}

// leases: the lease-scale scenario, each size held by each way in turn, and once with none
// held for the probes' baseline.
func leases(ctx context.Context, e *env, r *report, say func(string, ...any)) error {
	sizes, err := parseSizes(*leaseSizes)
	if err != nil {
		return harness(err)
	}
	pool, err := newPool(ctx, e.url, leaseConns)
	if err != nil {
		return harness(err)
	}
	defer pool.Close()
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "bench", TTL: *leaseTTL})
	if err != nil {
		return err
	}
	defer l.Close(context.Background())
	tryOnce := func(ctx context.Context, name string) error {
		lk, err := l.TryAcquire(ctx, name, nil)
		if err != nil {
			return err
		}
		return lk.Release(ctx)
	}
	together := leaseWay{name: "pglock: renewed together", hold: func(ctx context.Context, _ *pgxpool.Pool, prefix string, n int, held func(int)) (int, int, error) {
		return holdTogether(ctx, l, prefix, n, held)
	}, try: tryOnce}
	ways := []leaseWay{together}
	if *leaseBefore {
		ways = []leaseWay{{name: "a statement per lease (v0.1)", hold: holdPerLease, try: tryOnce}, together}
	}
	var results []leaseResult
	none, err := measureLeases(ctx, e, pool, together, 0, min(*leaseHold, 10*time.Second), say)
	if err != nil {
		return err
	}
	results = append(results, none)
	for _, n := range sizes {
		for _, w := range ways {
			say("%s: %d leases", w.name, n)
			res, err := measureLeases(ctx, e, pool, w, n, *leaseHold, say)
			if err != nil {
				return err
			}
			results = append(results, res)
		}
	}
	r.leases = results
	idle, err := idleCost(ctx, e, say)
	if err != nil {
		return err
	}
	r.leasesTable(idle)
	return nil
}

// idleHeld is how many leases one process holds, each with a waiter in another, in the
// idle-cost measurement.
const idleHeld = 5000

// idleResult is what holding idleHeld leases with as many waiters costs the database.
type idleResult struct {
	txPerSec, dbCPU float64
	window          time.Duration
}

// idleCost has one process hold idleHeld leases (TTL 10 s) and another wait for each of them,
// and measures what that costs the database while nothing changes hands.
func idleCost(ctx context.Context, e *env, say func(string, ...any)) (idleResult, error) {
	say("idle cost: %d leases held, a waiter on each in another process", idleHeld)
	var res idleResult
	open := func() (*tablelock.Locker, func(), error) {
		pool, err := newPool(ctx, e.url, leaseConns)
		if err != nil {
			return nil, nil, harness(err)
		}
		l, err := tablelock.New(pool, &tablelock.Config{AppName: "bench", TTL: 10 * time.Second})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return l, func() { l.Close(context.Background()); pool.Close() }, nil
	}
	holder, closeHolder, err := open()
	if err != nil {
		return res, err
	}
	defer closeHolder()
	waiter, closeWaiter, err := open()
	if err != nil {
		return res, err
	}
	defer closeWaiter()
	prefix := fmt.Sprintf("idle:%d", leaseRuns.Add(1))
	err = takeAll(ctx, idleHeld, func(ctx context.Context, i int) error {
		_, err := holder.TryAcquire(ctx, fmt.Sprintf("%s:%d", prefix, i), nil)
		return err
	})
	if err != nil {
		return res, err
	}
	waitCtx, stopWaiting := context.WithCancel(ctx)
	var waits sync.WaitGroup
	for i := range idleHeld {
		waits.Go(func() { waiter.Acquire(waitCtx, fmt.Sprintf("%s:%d", prefix, i), nil) })
	}
	defer func() { stopWaiting(); waits.Wait() }()
	for waiter.Stats().Waiting < idleHeld {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	if err := statsSettle(ctx); err != nil { // and the waiters' first polls are over
		return res, err
	}
	res.window = 20 * time.Second
	txBefore, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	cpuBefore, began := postgresCPU(), time.Now()
	select {
	case <-time.After(res.window):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	txAfter, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	elapsed := time.Since(began).Seconds()
	res.txPerSec, res.dbCPU = float64(txAfter-txBefore)/elapsed, (postgresCPU()-cpuBefore).Seconds()/elapsed
	say("  %.0f transactions/s, PostgreSQL %.2f cores", res.txPerSec, res.dbCPU)
	if held := holder.Stats().Held; held != idleHeld {
		return res, fmt.Errorf("idle cost: %d of %d leases held at the end", held, idleHeld)
	}
	return res, nil
}

func parseSizes(s string) ([]int, error) {
	var sizes []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-lease-sizes: %q is not a number of leases", part)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

var leaseRuns atomic.Int64

// measureLeases has w take n leases and hold them for hold: the first half measures what
// holding costs the database, the second the probes' latency.
func measureLeases(ctx context.Context, e *env, pool *pgxpool.Pool, w leaseWay, n int, hold time.Duration, say func(string, ...any)) (leaseResult, error) {
	res := leaseResult{way: w.name, leases: n}
	prefix := fmt.Sprintf("scale:%d", leaseRuns.Add(1))
	holdCtx, release := context.WithCancel(ctx)
	defer release()
	started := time.Now()
	heldCh := make(chan int, 1)
	type outcome struct {
		taken, lost int
		err         error
	}
	done := make(chan outcome, 1)
	go func() {
		taken, lost, err := w.hold(holdCtx, pool, prefix, n, func(taken int) { heldCh <- taken })
		done <- outcome{taken, lost, err}
	}()
	select {
	case res.taken = <-heldCh:
	case o := <-done:
		return res, fmt.Errorf("%s: %w", w.name, o.err)
	}
	res.acquireAll, res.refused = time.Since(started), saturated.Swap(0)
	say("  %d of %d taken in %s (%d refusals for saturation); holding for %s", res.taken, n, res.acquireAll.Round(time.Millisecond), res.refused, hold)

	if err := statsSettle(ctx); err != nil {
		return res, err
	}
	txBefore, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	cpuBefore := postgresCPU()
	quiet := time.Now()
	select {
	case <-time.After(hold / 2):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	txAfter, err := transactions(ctx, e)
	if err != nil {
		return res, harness(err)
	}
	elapsed := time.Since(quiet).Seconds()
	res.txPerSec = float64(txAfter-txBefore) / elapsed
	res.dbCPU = (postgresCPU() - cpuBefore).Seconds() / elapsed

	var samples []time.Duration
	probeEnd := time.Now().Add(hold / 2)
	for i := 0; time.Now().Before(probeEnd); i++ { // TryAcquire+Release on free names
		start := time.Now()
		err := w.try(ctx, fmt.Sprintf("%s:probe:%d", prefix, i))
		switch {
		case errors.Is(err, pglock.ErrSaturated):
			res.probesRefused++
			time.Sleep(50 * time.Millisecond)
			continue
		case err != nil:
			return res, fmt.Errorf("%s: probe: %w", w.name, err)
		}
		samples = append(samples, time.Since(start))
	}
	res.tryP50 = summarize(samples).p50
	release()
	o := <-done
	if o.err != nil {
		return res, fmt.Errorf("%s: %w", w.name, o.err)
	}
	res.lost = o.lost
	say("  lost %d; %.0f transactions/s, PostgreSQL %.2f cores; try p50 %s (%d refused: saturated)", res.lost, res.txPerSec, res.dbCPU, ms(res.tryP50), res.probesRefused)
	return res, nil
}

// holdTogether takes n leases with l and holds them until ctx ends.
func holdTogether(ctx context.Context, l *tablelock.Locker, prefix string, n int, held func(int)) (taken, lost int, err error) {
	var (
		mu    sync.Mutex
		locks []*tablelock.Lock
	)
	err = takeAll(ctx, n, func(ctx context.Context, i int) error {
		lk, err := l.TryAcquire(ctx, fmt.Sprintf("%s:%d", prefix, i), nil)
		if err != nil {
			return err
		}
		mu.Lock()
		locks = append(locks, lk)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	held(len(locks))
	<-ctx.Done()
	for _, lk := range locks {
		if lk.Err() != nil {
			lost++
		}
	}
	err = takeAll(context.Background(), len(locks), func(ctx context.Context, i int) error {
		if err := locks[i].Release(ctx); err != nil && !errors.Is(err, pglock.ErrLockLost) {
			return err
		}
		return nil
	})
	return len(locks), lost, err
}

// holdPerLease is v0.1's way: each lease renews itself every third of its TTL with a
// statement of its own (extend_lock_ms), and is lost when a renewal finds it gone or none
// gets through before its TTL less a tenth.
func holdPerLease(ctx context.Context, pool *pgxpool.Pool, prefix string, n int, held func(int)) (taken, lost int, err error) {
	ttl := *leaseTTL
	var (
		mu      sync.Mutex
		names   []string
		lostN   atomic.Int64
		renewal sync.WaitGroup
	)
	keep := func(name string, acquired time.Time) {
		deadline := acquired.Add(ttl - ttl/10)
		var beat func()
		beat = func() {
			defer renewal.Done()
			if ctx.Err() != nil {
				return
			}
			start := time.Now()
			rctx, cancel := context.WithDeadline(ctx, deadline)
			var expires *time.Time
			err := pool.QueryRow(rctx, "SELECT extend_lock_ms($1, 'bench', $2)", name, ttl.Milliseconds()).Scan(&expires)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err == nil && expires == nil, time.Now().After(deadline):
				lostN.Add(1)
				return
			case err == nil:
				deadline = start.Add(ttl - ttl/10)
			}
			renewal.Add(1)
			time.AfterFunc(ttl/3, beat)
		}
		renewal.Add(1)
		time.AfterFunc(ttl/3, beat)
	}
	err = takeAll(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s:%d", prefix, i)
		start := time.Now()
		var acquired bool
		if err := pool.QueryRow(ctx, "SELECT acquired FROM acquire_lock_ms($1, 'bench', $2)", name, ttl.Milliseconds()).Scan(&acquired); err != nil {
			return err
		}
		if !acquired {
			return fmt.Errorf("%s was not free", name)
		}
		keep(name, start)
		mu.Lock()
		names = append(names, name)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	held(len(names))
	<-ctx.Done()
	renewal.Wait()
	err = takeAll(context.Background(), len(names), func(ctx context.Context, i int) error {
		_, err := pool.Exec(ctx, "SELECT release_lock($1, 'bench')", names[i])
		return err
	})
	return len(names), int(lostN.Load()), err
}

// saturated counts the acquisitions refused with pglock.ErrSaturated (and tried again).
var saturated atomic.Int64

// takeAll runs take for 0..n-1, leaseAcquirers at a time, until all are done, one fails, or
// leaseAcquireBudget has passed (then what was done stands: leases not released run out). An
// acquisition refused because the renewals are behind is tried again 50 ms later.
func takeAll(ctx context.Context, n int, take func(ctx context.Context, i int) error) error {
	budget, cancel := context.WithTimeout(ctx, leaseAcquireBudget)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		once     sync.Once
	)
	for range leaseAcquirers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || budget.Err() != nil {
					return
				}
				err := take(budget, i)
				for errors.Is(err, pglock.ErrSaturated) && budget.Err() == nil {
					// The renewals of what is held come first: wait for them, as a caller would.
					saturated.Add(1)
					time.Sleep(50 * time.Millisecond)
					err = take(budget, i)
				}
				if err != nil {
					if budget.Err() == nil || ctx.Err() != nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// statsSettle waits until what the backends did so far has reached pg_stat_database: a
// backend flushes its counts at the end of a transaction at most once a second, and an idle one
// after 10 s (PGSTAT_IDLE_INTERVAL), so counts from before a window would land in it.
func statsSettle(ctx context.Context) error {
	select {
	case <-time.After(11 * time.Second):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// transactions is how many transactions the benchmark's database has committed or rolled back.
func transactions(ctx context.Context, e *env) (int64, error) {
	var n int64
	// pg_stat_database is flushed by each backend at most once a second: force ours.
	_, err := e.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
	if err != nil {
		return 0, err
	}
	err = e.admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// postgresCPU is the CPU time every process named postgres on this machine has used so far,
// with the processes they waited for that ended.
func postgresCPU() time.Duration {
	entries, _ := os.ReadDir("/proc")
	var ticks int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open || s[open+1:close] != "postgres" {
			continue
		}
		fields := strings.Fields(s[close+1:])
		if len(fields) < 15 {
			continue
		}
		// A process's own time, and that of its children that ended: a backend (or autovacuum
		// worker) that exits within the window takes its time out of the sum of the living, and
		// the postmaster, their parent, gets it back (a window once measured -25 cores without).
		for _, field := range fields[11:15] {
			t, _ := strconv.ParseInt(field, 10, 64)
			ticks += t
		}
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ, 100 on Linux
}
