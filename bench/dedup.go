package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglock/pglock/jobs"
)

const (
	dedupInstances = 4
	dedupRounds    = 3
	dedupSlot      = 1500 * time.Millisecond
)

// dedupWorkers are the numbers of workers measured, spread over the instances.
var dedupWorkers = []int{4, 16}

// A dedupWay is one way of delivering keys whose effect is one INSERT each: a key per call, or
// batch keys per call.
type dedupWay struct {
	name    string
	batch   int // keys per call; 0 for one
	deliver func(ctx context.Context, instance int, keys []string) error
}

// one makes a way's deliver of one key per call.
func one(deliver func(ctx context.Context, instance int, key string) error) func(ctx context.Context, instance int, keys []string) error {
	return func(ctx context.Context, instance int, keys []string) error { return deliver(ctx, instance, keys[0]) }
}

// dedupBatch is how many keys the batch way delivers per call.
const dedupBatch = 50

// dedupResult is what one way measured with one number of workers.
type dedupResult struct {
	way        string
	workers    int
	batch      int     // keys per call, 1 or more
	latency    latency // of a call
	deliveries int
	spent      time.Duration
	walBytes   int64 // written while its slots ran, by the whole server
}

func (d dedupResult) perSecond() float64 { return float64(d.deliveries) / d.spent.Seconds() }

// walPerDelivery is the WAL the server wrote per delivery in the way's slots.
func (d dedupResult) walPerDelivery() float64 {
	return float64(d.walBytes) / float64(max(d.deliveries, 1))
}

// dedup: instances delivering distinct keys, each delivery's effect one INSERT: in a raw
// transaction (no deduplication), behind a hand-written inbox table, through jobs.RunTx, behind
// River's unique insert, on database/sql (a raw transaction, and jobs.RunTxSQL), and through
// jobs.RunTxBatch (many keys a call), in
// alternating slots whose order rotates, with 4 and with 16 workers.
func dedup(ctx context.Context, e *env, r *report, _ func(string, ...any)) error {
	if _, err := e.admin.Exec(ctx, `CREATE TABLE bench_effects (key text NOT NULL);
		CREATE TABLE bench_inbox (key text PRIMARY KEY)`); err != nil {
		return err
	}
	pools := make([]*pgxpool.Pool, dedupInstances)
	sqlDBs := make([]*sql.DB, dedupInstances) // database/sql on the same pools (pgx's stdlib)
	dedupers := make([]*jobs.Deduper, dedupInstances)
	for i := range pools {
		pool, err := newPool(ctx, e.url, int32(max(dedupWorkers[len(dedupWorkers)-1]/dedupInstances, 1)))
		if err != nil {
			return err
		}
		defer pool.Close()
		pools[i] = pool
		sqlDBs[i] = stdlib.OpenDBFromPool(pool)
		defer sqlDBs[i].Close()
		if dedupers[i], err = jobs.New(pool, &jobs.Config{AppName: "bench"}); err != nil {
			return err
		}
	}
	rivers, err := newRiverClients(ctx, e.admin, pools)
	if err != nil {
		return err
	}
	effect := func(ctx context.Context, tx pgx.Tx, key string) error {
		_, err := tx.Exec(ctx, `INSERT INTO bench_effects (key) VALUES ($1)`, key)
		return err
	}
	sqlEffect := func(ctx context.Context, tx *sql.Tx, key string) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO bench_effects (key) VALUES ($1)`, key)
		return err
	}
	ran := func(res jobs.Result, err error, key string) error {
		if err == nil && res.Outcome != jobs.OutcomeRan {
			err = fmt.Errorf("a new key %s was not run: %v", key, res.Outcome)
		}
		return err
	}
	ways := []dedupWay{
		{name: "raw INSERT transaction (no deduplication)", deliver: one(func(ctx context.Context, i int, key string) error {
			return pgx.BeginFunc(ctx, pools[i], func(tx pgx.Tx) error { return effect(ctx, tx, key) })
		})},
		{name: "hand-written inbox table", deliver: one(func(ctx context.Context, i int, key string) error {
			return pgx.BeginFunc(ctx, pools[i], func(tx pgx.Tx) error {
				var first string
				err := tx.QueryRow(ctx, `INSERT INTO bench_inbox (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING key`, key).Scan(&first)
				if err == pgx.ErrNoRows {
					return nil // a duplicate: done before
				}
				if err != nil {
					return err
				}
				return effect(ctx, tx, key)
			})
		})},
		{name: "pglock jobs.RunTx", deliver: one(func(ctx context.Context, i int, key string) error {
			res, err := dedupers[i].RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error { return effect(ctx, tx, key) })
			return ran(res, err, key)
		})},
		{name: "River's unique InsertTx", deliver: one(func(ctx context.Context, i int, key string) error {
			return riverUniqueInsert(ctx, pools[i], rivers[i], key, effect)
		})},
		{name: "raw INSERT transaction on database/sql (pgx stdlib)", deliver: one(func(ctx context.Context, i int, key string) error {
			tx, err := sqlDBs[i].BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := sqlEffect(ctx, tx, key); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			return tx.Commit()
		})},
		{name: "pglock jobs.RunTxSQL (pgx stdlib)", deliver: one(func(ctx context.Context, i int, key string) error {
			res, err := dedupers[i].RunTxSQL(ctx, sqlDBs[i], key, nil, func(ctx context.Context, tx *sql.Tx) error { return sqlEffect(ctx, tx, key) })
			return ran(res, err, key)
		})},
		{name: fmt.Sprintf("pglock jobs.RunTxBatch (%d keys a call)", dedupBatch), batch: dedupBatch, deliver: func(ctx context.Context, i int, keys []string) error {
			delivered, err := dedupers[i].RunTxBatch(ctx, keys, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
				_, err := tx.Exec(ctx, `INSERT INTO bench_effects (key) SELECT unnest($1::text[])`, claimed)
				return err
			})
			for _, d := range delivered {
				if err == nil {
					err = ran(d.Result, d.Err, d.Key)
				}
			}
			return err
		}},
	}
	var keys atomic.Int64
	for _, workers := range dedupWorkers {
		results := make([]dedupResult, len(ways))
		samples := make([][]time.Duration, len(ways))
		for round := range dedupRounds {
			for k := range ways {
				way := (round + k) % len(ways)
				walBefore, err := walPosition(ctx, e.admin)
				if err != nil {
					return err
				}
				var mu sync.Mutex
				var wg sync.WaitGroup
				errs := make([]error, workers)
				start := time.Now()
				for w := range workers {
					wg.Go(func() {
						var mine []time.Duration
						for time.Since(start) < dedupSlot && errs[w] == nil {
							batch := make([]string, max(ways[way].batch, 1))
							for i := range batch {
								batch[i] = fmt.Sprint("delivery-", keys.Add(1))
							}
							began := time.Now()
							errs[w] = ways[way].deliver(ctx, w%dedupInstances, batch)
							mine = append(mine, time.Since(began))
						}
						mu.Lock()
						samples[way] = append(samples[way], mine...)
						mu.Unlock()
					})
				}
				wg.Wait()
				results[way].spent += time.Since(start)
				walAfter, err := walPosition(ctx, e.admin)
				if err != nil {
					return err
				}
				results[way].walBytes += walAfter - walBefore
				for _, err := range errs {
					if err != nil {
						return fmt.Errorf("%s: %w", ways[way].name, err)
					}
				}
			}
		}
		for k := range ways {
			results[k].way, results[k].workers, results[k].batch = ways[k].name, workers, max(ways[k].batch, 1)
			results[k].latency = summarize(samples[k])
			results[k].deliveries = len(samples[k]) * results[k].batch
		}
		r.dedup = append(r.dedup, results)
	}
	r.dedupTable()
	return nil
}

// walPosition is where the server's WAL ends now, in bytes.
func walPosition(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var lsn int64
	err := pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&lsn)
	return lsn, err
}
