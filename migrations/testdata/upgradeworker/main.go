// Command upgradeworker is one instance of an application on pglock, for the test that upgrades
// the SQL under running instances (TestUpgradeUnderRunningInstancesLosesNothing). It uses only
// API that v0.1.0 has too, so that the same source builds against v0.1.0 and against this tree.
//
// It holds lock-0 for as long as it can, takes and releases lock-1 to lock-3 in turn, runs a job
// key for every 25 ms inside transactions, and the schedule "tick" every second, writing
// each effect into upgrade_effects; it prints "LOST <name>" when a lock is lost. SIGTERM stops
// it, releasing what it holds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/migrations"
	"github.com/pglock/pglock/tablelock"
)

func main() {
	url := flag.String("url", "", "the database")
	name := flag.String("name", "", "this instance's name, in upgrade_effects")
	migrate := flag.Bool("migrate", false, "apply this build's migrations and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		fail(err)
	}
	defer pool.Close()
	if *migrate {
		if err := migrations.Up(ctx, pool); err != nil {
			fail(err)
		}
		return
	}
	w := worker{pool: pool, name: *name}
	if err := w.run(ctx); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "upgradeworker:", err)
	os.Exit(1)
}

type worker struct {
	pool *pgxpool.Pool
	name string
}

func (w worker) run(ctx context.Context) error {
	locker, err := tablelock.New(w.pool, &tablelock.Config{AppName: w.name})
	if err != nil {
		return err
	}
	deduper, err := jobs.New(w.pool, &jobs.Config{AppName: w.name, Scope: "upgrade"})
	if err != nil {
		return err
	}
	scheduler, err := cron.New(w.pool, &cron.Config{AppName: w.name})
	if err != nil {
		return err
	}
	if err := scheduler.Add("tick", "@every 1s", nil, func(ctx context.Context, run cron.Run) error {
		return w.effect(ctx, "tick", run.ScheduledTime.UTC().Format(time.RFC3339Nano), run.Token)
	}); err != nil {
		return err
	}
	if err := scheduler.Start(ctx); err != nil {
		return err
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errs <- w.hold(ctx, locker, "lock-0") }()
	go func() { defer wg.Done(); errs <- w.cycle(ctx, locker) }()
	go func() { defer wg.Done(); errs <- w.jobs(ctx, deduper) }()
	wg.Wait()
	close(errs)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(scheduler.Stop(stopCtx), locker.Close(stopCtx))
	for e := range errs {
		err = errors.Join(err, e)
	}
	return err
}

// hold takes name and keeps it until ctx ends (taking it again only if it was lost).
func (w worker) hold(ctx context.Context, locker *tablelock.Locker, name string) error {
	for ctx.Err() == nil {
		lk, err := locker.Acquire(ctx, name, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := w.fenced(ctx, lk); err != nil {
			if ctx.Err() != nil { // stopped while taking it: a handoff as the holder stopped
				return lk.Release(context.WithoutCancel(ctx))
			}
			return err
		}
		select {
		case <-lk.Lost():
			fmt.Printf("LOST %s %v\n", name, lk.Err())
		case <-ctx.Done():
			return lk.Release(context.WithoutCancel(ctx))
		}
	}
	return nil
}

// cycle takes lock-1 to lock-3 in turn, when free, for a moment each.
func (w worker) cycle(ctx context.Context, locker *tablelock.Locker) error {
	for i := 0; ctx.Err() == nil; i++ {
		name := fmt.Sprintf("lock-%d", 1+i%3)
		lk, err := locker.TryAcquire(ctx, name, nil)
		switch {
		case errors.Is(err, pglock.ErrLocked):
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		default:
			if err := w.fenced(ctx, lk); err != nil {
				if ctx.Err() != nil {
					return lk.Release(context.WithoutCancel(ctx))
				}
				return err
			}
			sleep(ctx, 50*time.Millisecond)
			select {
			case <-lk.Lost():
				fmt.Printf("LOST %s %v\n", name, lk.Err())
			default:
			}
			if err := lk.Release(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return nil
}

// jobs runs a job for every 25 ms of the clock, each inside a transaction that writes its
// effect: every instance delivers the current key, again and again while it is current, and
// each effect must be written once. An instance that starts late joins at the current key.
func (w worker) jobs(ctx context.Context, deduper *jobs.Deduper) error {
	for ctx.Err() == nil {
		key := fmt.Sprintf("job-%d", time.Now().UnixMilli()/25)
		_, err := deduper.RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO upgrade_effects (instance, kind, key) VALUES ($1, 'job', $2)", w.name, key)
			return err
		})
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("job %s: %w", key, err)
		}
		sleep(ctx, 5*time.Millisecond)
	}
	return nil
}

// fenced writes the lock's effect in a transaction fenced by its token.
func (w worker) fenced(ctx context.Context, lk *tablelock.Lock) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := lk.Fence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO upgrade_effects (instance, kind, key, token) VALUES ($1, 'lock', $2, $3)", w.name, lk.Name(), lk.Token())
		return err
	})
}

func (w worker) effect(ctx context.Context, kind, key string, token int64) error {
	_, err := w.pool.Exec(ctx, "INSERT INTO upgrade_effects (instance, kind, key, token) VALUES ($1, $2, $3, $4)", w.name, kind, key, token)
	return err
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
