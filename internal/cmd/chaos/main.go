// Command chaos is `make chaos`: pglock's locks broken on purpose. It starts a PostgreSQL
// cluster of its own, worker processes (this same binary) that each run fenced critical
// sections on a few shared names, a cron scheduler, job deliveries and a leader candidate, every
// connection through a TCP relay of the worker's own (testdb.Proxy), and a controller that injects faults:
// backends terminated, workers partitioned from PostgreSQL or slowed, workers frozen (SIGSTOP,
// then SIGCONT) past their leases, workers killed with SIGKILL (and restarted), and PostgreSQL
// restarted in immediate mode. Afterwards a checker
// reads the evidence from the database and prints one line: operations, faults by kind, and
// violations, which must be 0 (the exit status says so too).
//
//	chaos -duration 60s   # the short mode, run in CI
//	chaos -duration 30m   # a long run
//	chaos -unfenced       # critical sections without fencing: the checker must find violations
//	chaos -ha sync        # make ha: the same workers on two nodes under Patroni, whose primary's
//	chaos -ha async       # postmaster is killed once, halfway (ha.go)
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

// workerEnv, when set to a worker's name, makes this binary a worker (worker.go);
// unfencedEnv makes its critical sections write without fencing.
const (
	workerEnv   = "PGLOCK_CHAOS_WORKER"
	unfencedEnv = "PGLOCK_CHAOS_UNFENCED"
	ledgerEnv   = "PGLOCK_CHAOS_LEDGER" // make ha's: the file a worker writes what it was told to (ledger.go)
)

func main() {
	if name := os.Getenv(workerEnv); name != "" {
		if err := work(name); err != nil {
			fmt.Fprintf(os.Stderr, "chaos worker %s: %v\n", name, err)
			os.Exit(1)
		}
		return
	}
	duration := flag.Duration("duration", 60*time.Second, "how long the workers run under faults")
	workers := flag.Int("workers", 3, "worker processes")
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()), "seeds the choice of faults (their timing still varies)")
	verbose := flag.Bool("v", false, "log each fault as it is injected, and keep the workers' logs")
	unfenced := flag.Bool("unfenced", false, "critical sections write without fencing: the checker should find violations")
	ha := flag.String("ha", "", "sync or async: run on a Patroni cluster in that replication mode, whose primary is killed once, halfway, instead of injecting faults")
	flag.Parse()
	if *unfenced {
		os.Setenv(unfencedEnv, "1") // the workers inherit it
	}
	switch *ha {
	case "":
	case "sync", "async":
		os.Exit(controlHA(*duration, *workers, *ha == "sync", *verbose))
	default:
		fmt.Fprintf(os.Stderr, "chaos: -ha %q: want sync or async\n", *ha)
		os.Exit(2)
	}
	os.Exit(control(*duration, *workers, *seed, *verbose))
}
