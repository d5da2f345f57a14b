package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/jobs"
)

const (
	dedupWorkers = 4
	dedupRounds  = 3
	dedupSlot    = 1500 * time.Millisecond
)

// dedup: 4 instances delivering distinct keys, each delivery's effect one INSERT, through
// jobs.RunTx against the same INSERT in a raw transaction, in alternating slots.
func dedup(ctx context.Context, e *env, r *report, _ func(string, ...any)) error {
	if _, err := e.admin.Exec(ctx, `CREATE TABLE bench_effects (key text NOT NULL)`); err != nil {
		return err
	}
	pools := make([]*pgxpool.Pool, dedupWorkers)
	dedupers := make([]*jobs.Deduper, dedupWorkers)
	for i := range pools {
		pool, err := newPool(ctx, e.url, 4)
		if err != nil {
			return err
		}
		defer pool.Close()
		pools[i] = pool
		if dedupers[i], err = jobs.New(pool, &jobs.Config{AppName: "bench"}); err != nil {
			return err
		}
	}
	key := 0
	var keyMu sync.Mutex
	nextKey := func() string {
		keyMu.Lock()
		defer keyMu.Unlock()
		key++
		return fmt.Sprint("delivery-", key)
	}
	insert := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO bench_effects (key) VALUES ($1)`, key)
		return err
	}
	ways := []func(worker int) error{
		func(w int) error {
			return pgx.BeginFunc(ctx, pools[w], func(tx pgx.Tx) error { return insert(ctx, tx, nextKey()) })
		},
		func(w int) error {
			key := nextKey()
			_, err := dedupers[w].RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error { return insert(ctx, tx, key) })
			return err
		},
	}
	samples := make([][]time.Duration, len(ways))
	var spent [2]time.Duration
	for round := range dedupRounds {
		for k := range ways {
			way := (round + k) % len(ways)
			var mu sync.Mutex
			var wg sync.WaitGroup
			errs := make([]error, dedupWorkers)
			start := time.Now()
			for w := range dedupWorkers {
				wg.Go(func() {
					for time.Since(start) < dedupSlot && errs[w] == nil {
						began := time.Now()
						errs[w] = ways[way](w)
						took := time.Since(began)
						mu.Lock()
						samples[way] = append(samples[way], took)
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			spent[way] += time.Since(start)
			for _, err := range errs {
				if err != nil {
					return err
				}
			}
		}
	}
	r.dedupTable(summarize(samples[0]), summarize(samples[1]), spent)
	return nil
}
