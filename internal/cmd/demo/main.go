// Command demo is `make demo`: pglock doing its job in one command. It makes a throwaway
// database (from DATABASE_URL, local PostgreSQL binaries, or Docker), starts three worker
// processes (this same binary), and plays a scene: a broker delivers 100 jobs at least twice
// each to random workers (package jobs, under a fleet-wide rate limit), a cron schedule ticks
// every 2 s on whichever worker claims the tick, and one leader runs a reconciliation loop;
// the leader resigns halfway, and later its process is killed. Then it checks, in the
// database, that every effect happened once and every tick ran once, reports the handoffs, and
// shows pglockctl's view.
package main

import (
	"fmt"
	"os"
)

// workerEnv, when set to a worker's number, makes this binary a worker (worker.go).
const workerEnv = "PGLOCK_DEMO_WORKER"

func main() {
	if id := os.Getenv(workerEnv); id != "" {
		if err := work(id); err != nil {
			fmt.Fprintf(os.Stderr, "demo worker %s: %v\n", id, err)
			os.Exit(1)
		}
		return
	}
	os.Exit(orchestrate())
}
