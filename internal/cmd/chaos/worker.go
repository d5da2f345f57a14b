package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

// The workload's names and settings, shared with the checker.
const (
	sectionNames      = 2 // names the critical sections contend for, across every worker
	sectionGoroutines = 4 // per worker
	lockTTL           = 3 * time.Second
	election          = "chaos-leader"
	leaderLock        = "pglock.leader/" + election // the table lock leadership is
	leaderTTL         = 2 * time.Second
	schedule          = "chaos-tick"
	jobKeys           = 300 // deliveries pick among these, a new set every jobKeyEvery: each key is delivered many times
	jobKeyEvery       = 5 * time.Second
	deliverers        = 2 // per worker
	placeGoroutines   = 3 // per worker: combined acquisitions of a tenant's place and a global one
	tenants           = 3 // the keys they count against
	globalPlaces      = 2 // the global semaphore's places
	tenantPlaces      = 4 // the tenants' semaphore's places, at most tenantCap a tenant
	tenantCap         = 1
)

// work is one worker process, named like w1.0 (worker 1, first incarnation). It runs until
// SIGTERM (or SIGKILL, from the controller), its connections all through the URL it is given.
func work(name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // faults make every component complain
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	book, err := openLedger(os.Getenv(ledgerEnv), name)
	if err != nil {
		return err
	}
	defer book.close()
	app := "chaos-" + name

	locker, err := tablelock.New(pool, &tablelock.Config{AppName: app, Logger: quiet})
	if err != nil {
		return err
	}
	defer locker.Close(context.Background())
	dedup, err := jobs.New(pool, &jobs.Config{AppName: app, Logger: quiet})
	if err != nil {
		return err
	}
	sched, err := cron.New(pool, &cron.Config{AppName: app, Logger: quiet})
	if err != nil {
		return err
	}
	// Every run is kept (cron's default keeps the newest 1,000): the checker reads them all.
	err = sched.Add(schedule, "@every 1s", &cron.Options{CatchUp: cron.CatchUpAll, TTL: lockTTL, MaxRuns: 1<<31 - 1},
		func(ctx context.Context, run cron.Run) error {
			_, err := pool.Exec(ctx, `INSERT INTO chaos_ticks (tick, worker, token) VALUES ($1, $2, $3)`, run.ScheduledTime, name, run.Token)
			if err == nil {
				book.tick(run.ScheduledTime, run.Token)
			}
			return err
		})
	if err != nil {
		return err
	}
	elector, err := leader.New(pool, election, &leader.Config{AppName: app, TTL: leaderTTL, Logger: quiet})
	if err != nil {
		return err
	}

	// A worker that does not stop within 5 s of being asked leaves its goroutines' stacks in
	// its log, for the controller's failure report.
	context.AfterFunc(ctx, func() {
		time.AfterFunc(5*time.Second, func() { pprof.Lookup("goroutine").WriteTo(os.Stderr, 1) })
	})
	var wg sync.WaitGroup
	// The scheduler's start retries until the database answers: a worker may start during a
	// fault.
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := sched.Start(ctx); err == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	unfenced := os.Getenv(unfencedEnv) != ""
	for g := range sectionGoroutines {
		wg.Go(func() { sections(ctx, pool, locker, book, name, fmt.Sprint("section-", g%sectionNames), unfenced) })
	}
	for range deliverers {
		wg.Go(func() { deliver(ctx, dedup, book, name) })
	}
	for g := range placeGoroutines {
		wg.Go(func() { visitPlaces(ctx, pool, locker, name, fmt.Sprint("tenant-", g%tenants)) })
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			err := elector.Run(ctx, leader.Callbacks{OnElected: func(electedCtx context.Context, term int64) {
				book.granted(leaderLock, term)
				stop := context.AfterFunc(electedCtx, func() {
					if ctx.Err() == nil {
						book.lost(leaderLock, term)
					}
				})
				defer stop()
				lead(ctx, electedCtx, pool, elector, name, term)
			}})
			if err != nil && ctx.Err() == nil {
				pause(ctx, 200*time.Millisecond) // the database is away: campaign again
			}
		}
	})
	wg.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return sched.Stop(stopCtx)
}

// pause waits up to max, or until ctx ends.
func pause(ctx context.Context, max time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(rand.N(max) + time.Millisecond):
	}
}

const insertWrite = `INSERT INTO chaos_writes (name, token, worker, kind) VALUES ($1, $2, $3, $4)`

// sections runs critical sections on name: enter, a write, leave, each a transaction fenced
// with the lock's token, so the database holds each section's interval and every write in the
// order they committed. A lock lost along the way is used once more, as a holder that missed
// its loss would: a write with its token, which must be refused. Unfenced, the writes skip the
// fence (chaos -unfenced, to show the checker finding what fencing prevents).
func sections(ctx context.Context, pool *pgxpool.Pool, locker *tablelock.Locker, book *ledger, worker, name string, unfenced bool) {
	for ctx.Err() == nil {
		lk, err := locker.Acquire(ctx, name, &tablelock.AcquireOptions{TTL: lockTTL})
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		book.granted(name, lk.Token())
		released := make(chan struct{})
		go func() {
			select {
			case <-lk.Lost():
			case <-released: // lost too, if the loss came as it ended
				if lk.Err() == nil {
					return
				}
			}
			book.lost(name, lk.Token())
		}()
		for _, kind := range []string{"enter", "write", "leave"} {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if !unfenced {
					if err := lk.Fence(ctx, tx); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, insertWrite, name, lk.Token(), worker, kind)
				return err
			})
			if err != nil {
				break
			}
			pause(ctx, 20*time.Millisecond)
		}
		select {
		case <-lk.Lost():
			if !unfenced {
				staleWrite(ctx, pool, "lock", worker, name, lk.Token())
			}
		default:
			lk.Release(ctx)
		}
		close(released)
	}
}

// visitPlaces takes, again and again, a place of the tenants' semaphore counted against tenant
// and one of the global semaphore, together (AcquireAll), and records entering and leaving, each
// in a transaction fenced with both places: the checker counts who was inside at once.
func visitPlaces(ctx context.Context, pool *pgxpool.Pool, locker *tablelock.Locker, worker, tenant string) {
	resources := []tablelock.Resource{
		{Semaphore: "chaos-global", Places: tablelock.Places{Permits: globalPlaces}},
		{Semaphore: "chaos-tenants", Places: tablelock.Places{Permits: tenantPlaces, Key: tenant, PerKey: tenantCap}},
	}
	for ctx.Err() == nil {
		ls, err := locker.AcquireAll(ctx, resources, &tablelock.AcquireOptions{TTL: lockTTL})
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		token := ls.Held()[0].Token
		for _, kind := range []string{"enter", "leave"} {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := ls.Fence(ctx, tx); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO chaos_places (token, tenant, worker, kind) VALUES ($1, $2, $3, $4)`,
					token, tenant, worker, kind)
				return err
			})
			if err != nil {
				break
			}
			pause(ctx, 20*time.Millisecond)
		}
		ls.Release(ctx)
	}
}

// staleWrite writes with the token of a lock (or leadership) this worker lost, through
// VerifyFence, the check a process that was handed only the name and token makes: the
// database alone must refuse it once another holder has the name.
func staleWrite(ctx context.Context, pool *pgxpool.Pool, kind, worker, name string, token int64) {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tablelock.VerifyFence(ctx, tx, name, token); err != nil {
			return err
		}
		if kind == "leader" {
			_, err := tx.Exec(ctx, `INSERT INTO chaos_leader_writes (term, worker, stale) VALUES ($1, $2, true)`, token, worker)
			return err
		}
		_, err := tx.Exec(ctx, insertWrite, name, token, worker, "stale")
		return err
	})
	recordStale(ctx, pool, kind, worker, token, err)
}

// recordStale records a stale write's outcome; one whose outcome is unknown (the connection
// failed) is not recorded: the evidence of what it wrote, if it did, is in the database.
func recordStale(ctx context.Context, pool *pgxpool.Pool, kind, worker string, token int64, err error) {
	if err != nil && !isRefusal(err) {
		return
	}
	pool.Exec(ctx, `INSERT INTO chaos_stale_attempts (kind, worker, token, accepted) VALUES ($1, $2, $3, $4)`, kind, worker, token, err == nil)
}

// deliver delivers random keys through jobs.RunTx, each delivery's effect a row.
func deliver(ctx context.Context, dedup *jobs.Deduper, book *ledger, worker string) {
	for ctx.Err() == nil {
		key := fmt.Sprintf("job-%d-%d", time.Now().UnixNano()/int64(jobKeyEvery), rand.IntN(jobKeys))
		res, err := dedup.RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO chaos_effects (key, worker) VALUES ($1, $2)`, key, worker)
			return err
		})
		if err == nil && res.Outcome == jobs.OutcomeRan {
			book.effect(key)
		}
		pause(ctx, 10*time.Millisecond)
	}
}

// lead is the leader's loop: a write fenced with its term every 50 ms while it leads. Deposed
// (not stopped), it writes once more with its term, as a leader that missed its demotion would,
// checked by the database alone (VerifyFence on the election's lock), which must refuse it
// once another leader has been elected.
func lead(ctx, electedCtx context.Context, pool *pgxpool.Pool, e *leader.Elector, worker string, term int64) {
	for electedCtx.Err() == nil {
		pgx.BeginFunc(electedCtx, pool, func(tx pgx.Tx) error {
			if err := e.Fence(electedCtx, tx); err != nil {
				return err
			}
			if e.Term() != term { // elected again since: this loop's term is over
				return errStaleTerm
			}
			_, err := tx.Exec(electedCtx, `INSERT INTO chaos_leader_writes (term, worker, stale) VALUES ($1, $2, false)`, term, worker)
			return err
		})
		pause(electedCtx, 50*time.Millisecond)
	}
	if ctx.Err() == nil {
		staleWrite(ctx, pool, "leader", worker, leaderLock, term)
	}
}

var errStaleTerm = errors.New("chaos: the elector leads in a later term")

// isRefusal reports whether err is a fence refusing a write, rather than a failure to ask.
func isRefusal(err error) bool {
	return errors.Is(err, pglock.ErrNotHeld) || errors.Is(err, pglock.ErrLockLost)
}
