package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/ratelimit"
)

// The scene's names and settings, shared with the orchestrator's checks.
const (
	election  = "demo-reconciler"
	schedule  = "demo-tick"
	apiLimit  = "partner-api"
	apiRate   = 40 // calls per second, fleet-wide
	apiBurst  = 5
	leaderTTL = 2 * time.Second
)

// work is one worker process: it reads commands on stdin ("job N", "resign"), runs jobs, cron
// and the election until stdin closes, then stops cleanly.
func work(id string) error {
	worker, err := strconv.Atoi(id)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	app := fmt.Sprintf("demo-w%d", worker)

	dedup, err := jobs.New(pool, &jobs.Config{AppName: app})
	if err != nil {
		return err
	}
	limiter, err := ratelimit.New(pool, nil)
	if err != nil {
		return err
	}
	sched, err := cron.New(pool, &cron.Config{AppName: app})
	if err != nil {
		return err
	}
	err = sched.Add(schedule, "@every 2s", nil, func(ctx context.Context, run cron.Run) error {
		_, err := pool.Exec(ctx, `INSERT INTO demo_ticks (tick, worker, token) VALUES ($1, $2, $3)`, run.ScheduledTime, worker, run.Token)
		return err
	})
	if err != nil {
		return err
	}
	if err := sched.Start(ctx); err != nil {
		return err
	}
	elector, err := leader.New(pool, election, &leader.Config{AppName: app, TTL: leaderTTL})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	electionCtx, endElection := context.WithCancel(ctx)
	defer endElection()
	wg.Add(1)
	go func() {
		defer wg.Done()
		elector.Run(electionCtx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
			event(ctx, pool, "elected", worker, term)
			reconcile(ctx, pool, worker, term)
		}})
	}()

	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		cmd, arg, _ := strings.Cut(lines.Text(), " ")
		switch cmd {
		case "job":
			if err := deliver(ctx, pool, dedup, limiter, worker, arg); err != nil {
				return err
			}
		case "resign":
			if term := elector.Term(); elector.IsLeader() {
				event(ctx, pool, "resigned", worker, term)
				if err := elector.Resign(ctx); err != nil {
					return err
				}
				staleWrite(ctx, pool, worker, term)
			}
		}
	}
	endElection()
	wg.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return sched.Stop(stopCtx)
}

// deliver handles one delivery of a job: its effect (a row, under the partner API's rate limit)
// commits with its record, once, however often it is delivered.
func deliver(ctx context.Context, pool *pgxpool.Pool, dedup *jobs.Deduper, limiter *ratelimit.Limiter, worker int, job string) error {
	_, err := dedup.RunTx(ctx, "job-"+job, nil, func(ctx context.Context, tx pgx.Tx) error {
		if err := limiter.Wait(ctx, apiLimit, ratelimit.Limit{Rate: apiRate, Per: time.Second, Burst: apiBurst}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO demo_effects (job, worker) VALUES ($1, $2)`, job, worker)
		return err
	})
	return err
}

// reconcile is the leader's loop: every 200 ms it writes to the shared state with its term,
// which the state accepts only if no newer term has written.
func reconcile(ctx context.Context, pool *pgxpool.Pool, worker int, term int64) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			pool.Exec(ctx, `UPDATE demo_state SET term = $1, worker = $2, writes = writes + 1 WHERE term <= $1`, term, worker)
		}
	}
}

// staleWrite is a deposed leader's write with its old term, once a newer leader has written:
// the state refuses it.
func staleWrite(ctx context.Context, pool *pgxpool.Pool, worker int, term int64) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var current int64
		if err := pool.QueryRow(ctx, `SELECT term FROM demo_state`).Scan(&current); err == nil && current > term {
			tag, err := pool.Exec(ctx, `UPDATE demo_state SET term = $1, worker = $2, writes = writes + 1 WHERE term <= $1`, term, worker)
			if err == nil && tag.RowsAffected() == 0 {
				event(ctx, pool, "stale-rejected", worker, term)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func event(ctx context.Context, pool *pgxpool.Pool, kind string, worker int, term int64) {
	if _, err := pool.Exec(ctx, `INSERT INTO demo_events (kind, worker, term) VALUES ($1, $2, $3)`, kind, worker, term); err != nil &&
		!errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "demo worker %d: record %s: %v\n", worker, kind, err)
	}
}
