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

	"github.com/pglock/pglock"
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
	// Ctrl-C reaches the whole process group: the orchestrator, not the terminal, stops workers.
	signal.Ignore(os.Interrupt)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	app := fmt.Sprintf("demo-w%d", worker)
	obs, stopMetrics, err := serveMetrics(os.Getenv(metricsEnv))
	if err != nil {
		return err
	}
	defer stopMetrics()

	dedup, err := jobs.New(pool, &jobs.Config{AppName: app, Observer: obs})
	if err != nil {
		return err
	}
	limiter, err := ratelimit.New(pool, &ratelimit.Config{Name: apiLimit, Observer: obs})
	if err != nil {
		return err
	}
	sched, err := cron.New(pool, &cron.Config{AppName: app, Observer: obs})
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
	elector, err := leader.New(pool, election, &leader.Config{AppName: app, TTL: leaderTTL, Observer: obs})
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
			reconcile(ctx, pool, elector, worker, term)
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
				staleWrite(ctx, pool, elector, worker, term)
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
// commits with its record, once, however often it is delivered. The delivery's outcome is
// recorded for the orchestrator's check.
func deliver(ctx context.Context, pool *pgxpool.Pool, dedup *jobs.Deduper, limiter *ratelimit.Limiter, worker int, job string) error {
	res, err := dedup.RunTx(ctx, "job-"+job, nil, func(ctx context.Context, tx pgx.Tx) error {
		if err := limiter.Wait(ctx, apiLimit, ratelimit.Limit{Rate: apiRate, Per: time.Second, Burst: apiBurst}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO demo_effects (job, worker) VALUES ($1, $2)`, job, worker)
		return err
	})
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `INSERT INTO demo_deliveries (job, worker, outcome) VALUES ($1, $2, $3)`, job, worker, res.Outcome.String())
	return err
}

// reconcile is the leader's loop: every 200 ms a write fenced with its term, which commits only
// while this worker leads.
func reconcile(ctx context.Context, pool *pgxpool.Pool, e *leader.Elector, worker int, term int64) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fencedWrite(ctx, pool, e, worker, term)
		}
	}
}

func fencedWrite(ctx context.Context, pool *pgxpool.Pool, e *leader.Elector, worker int, term int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := e.Fence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO demo_reconcile (term, worker) VALUES ($1, $2)`, term, worker)
		return err
	})
}

// staleWrite is a deposed leader that carries on as if it still led: once a newer term has
// written, it tries a fenced write of its own, which the fence refuses.
func staleWrite(ctx context.Context, pool *pgxpool.Pool, e *leader.Elector, worker int, term int64) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var newer bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM demo_reconcile WHERE term > $1)`, term).Scan(&newer); err != nil || !newer {
			continue
		}
		kind := "stale-committed"
		if err := fencedWrite(ctx, pool, e, worker, term); errors.Is(err, pglock.ErrNotHeld) || errors.Is(err, pglock.ErrLockLost) {
			kind = "stale-rejected"
		} else if err != nil {
			kind = "stale-failed"
		}
		event(ctx, pool, kind, worker, term)
		return
	}
}

func event(ctx context.Context, pool *pgxpool.Pool, kind string, worker int, term int64) {
	if _, err := pool.Exec(ctx, `INSERT INTO demo_events (kind, worker, term) VALUES ($1, $2, $3)`, kind, worker, term); err != nil &&
		!errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "demo worker %d: record %s: %v\n", worker, kind, err)
	}
}
