package leader_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

// childEnv, when set (to "URL election"), makes the test binary a candidate process that prints
// "elected" once it leads, for BenchmarkCrashFailover to kill.
const childEnv = "PGLOCK_LEADER_CANDIDATE"

func init() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	url, election, _ := strings.Cut(spec, " ")
	pool, err := pgxpool.New(context.Background(), url)
	if err == nil {
		var e *leader.Elector
		if e, err = leader.New(pool, election, &leader.Config{AppName: "doomed", TTL: 2 * time.Second}); err == nil {
			err = e.Run(context.Background(), leader.Callbacks{OnElected: func(ctx context.Context, _ int64) {
				fmt.Println("elected")
				<-ctx.Done()
			}})
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// BenchmarkResignHandoff: 3 candidates on separate pools; the leader resigns, and the time to
// the next OnElected is measured. In the same run, the floor it builds on: a tablelock Release
// handing the lock to a waiting Acquire on another pool. Goal: p99 ≤ 50 ms.
func BenchmarkResignHandoff(b *testing.B) {
	d := testdb.New(b, nil)
	elected := make(chan *leader.Elector, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 3)
	for range 3 {
		e, err := leader.New(d.NewPool(b, nil), "bench", &leader.Config{AppName: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer func() { done <- struct{}{} }()
			e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) {
				elected <- e
				<-ctx.Done()
			}})
		}()
	}
	defer func() { cancel(); <-done; <-done; <-done }()
	current := <-elected
	waitForCandidates(b, d.Pool, "bench", 2)

	first, err := tablelock.New(d.NewPool(b, nil), &tablelock.Config{AppName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	second, err := tablelock.New(d.NewPool(b, nil), &tablelock.Config{AppName: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer first.Close(context.Background())
	defer second.Close(context.Background())
	var elections, handoffs []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := current.Resign(context.Background()); err != nil {
			b.Fatal(err)
		}
		current = <-elected
		elections = append(elections, time.Since(start))
		waitForCandidates(b, d.Pool, "bench", 2) // the resigned one queued again

		held, err := first.Acquire(context.Background(), "floor", nil)
		if err != nil {
			b.Fatal(err)
		}
		acquired := make(chan *tablelock.Lock)
		go func() {
			lk, _ := second.Acquire(context.Background(), "floor", nil)
			acquired <- lk
		}()
		waitForWaiterB(b, d.Pool, "floor")
		start = time.Now()
		held.Release(context.Background())
		lk := <-acquired
		handoffs = append(handoffs, time.Since(start))
		lk.Release(context.Background())
	}
	benchkit.Percentiles(b, "resign-to-elected", elections)
	benchkit.Percentiles(b, "tablelock-handoff", handoffs)
	slices.Sort(elections)
	slices.Sort(handoffs)
	b.ReportMetric(float64(elections[len(elections)/2])/float64(handoffs[len(handoffs)/2]), "leader/tablelock-p50")
}

func waitForWaiterB(b *testing.B, pool *pgxpool.Pool, name string) {
	testdb.WaitFor(b, func() bool {
		var n int
		return pool.QueryRow(context.Background(), `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = $1`, name).Scan(&n) == nil && n > 0
	}, "somebody waits for %q", name)
}

// BenchmarkCrashFailover: the leader is a separate process, killed with SIGKILL; a candidate
// in this process is elected once the leader's 2 s lease expires. Reported: the time from the
// kill to the next OnElected, and its ratio to the TTL. Goal: ≤ 2.5 s.
func BenchmarkCrashFailover(b *testing.B) {
	d := testdb.New(b, nil)
	const ttl = 2 * time.Second
	var failovers []time.Duration
	for i := 0; b.Loop(); i++ {
		election := fmt.Sprint("crash-", i)
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), childEnv+"="+d.URL()+" "+election)
		stdout, _ := child.StdoutPipe()
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "elected\n" {
			child.Process.Kill()
			b.Fatalf("the child process did not lead: %q, %v", line, err)
		}
		e, err := leader.New(d.Pool, election, &leader.Config{AppName: "bench", TTL: ttl})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		elected := make(chan time.Time, 1)
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) {
				elected <- time.Now()
				<-ctx.Done()
			}})
		}()
		waitForCandidates(b, d.Pool, election, 1)
		killed := time.Now()
		child.Process.Signal(syscall.SIGKILL)
		child.Wait()
		failovers = append(failovers, (<-elected).Sub(killed))
		cancel()
		<-ran
	}
	benchkit.Percentiles(b, "kill-to-elected", failovers)
	slices.Sort(failovers)
	b.ReportMetric(float64(failovers[len(failovers)/2])/float64(ttl), "failover/ttl-p50")
}
