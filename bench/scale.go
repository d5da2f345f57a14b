package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock/migrations"
)

// fillPostgres makes rows live locks in every PostgreSQL design's table on pool.
func fillPostgres(ctx context.Context, pool *pgxpool.Pool, rows int) error {
	for _, q := range []string{
		`INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at)
			SELECT 'filler:' || n, 'filler', n, clock_timestamp(), clock_timestamp() + interval '1 day'
			  FROM generate_series(1, $1::int) n`,
		`INSERT INTO seed_design.distributed_locks (lock_name, holder_id, acquired_at, expires_at)
			SELECT 'filler:' || n, 'filler', now(), now() + interval '1 day' FROM generate_series(1, $1::int) n`,
		cirelloFillSQL,
	} {
		if q == "" {
			continue
		}
		if _, err := pool.Exec(ctx, q, rows); err != nil {
			return err
		}
	}
	// Only the tables filled: an ANALYZE of the database would record pglock_jobs as empty, and
	// every claim after it would scan the table (a sequential scan is the cheapest plan for an
	// empty one) until autovacuum analyzed it again.
	tables := "distributed_locks, seed_design.distributed_locks"
	if cirelloFillSQL != "" {
		tables += ", " + cirelloTable
	}
	_, err := pool.Exec(ctx, "ANALYZE "+tables)
	return err
}

// fillRedis makes keys live locks in Redis database db, expiring in 10 minutes, and returns
// a function that deletes them.
func fillRedis(ctx context.Context, addr string, db, keys int) (func(), error) {
	client := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	batch := func(each func(redis.Pipeliner, string)) error {
		for from := 0; from < keys; from += 10_000 {
			pipe := client.Pipeline()
			for n := from; n < min(from+10_000, keys); n++ {
				each(pipe, fmt.Sprintf("pglock-bench:filler:%d", n))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	err := batch(func(p redis.Pipeliner, key string) { p.Set(ctx, key, "filler", 10*time.Minute) })
	return func() {
		batch(func(p redis.Pipeliner, key string) { p.Del(ctx, key) })
		client.Close()
	}, err
}

// siblingDatabase makes another database on the server of dbURL, migrated and with the seed
// design, so that two sizes are measured on one server; drop drops it.
func siblingDatabase(ctx context.Context, dbURL string) (url string, drop func(), err error) {
	admin, err := pgx.Connect(ctx, maintenanceURL(dbURL))
	if err != nil {
		return "", nil, err
	}
	name := fmt.Sprintf("pglock_bench_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return "", nil, err
	}
	drop = func() {
		admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
		admin.Close(context.Background())
	}
	url = withDatabase(dbURL, name)
	pool, err := newPool(ctx, url, 2)
	if err == nil {
		err = migrations.Up(ctx, pool)
		if err == nil {
			_, err = pool.Exec(ctx, seedSchema)
		}
		pool.Close()
	}
	if err != nil {
		drop()
		return "", nil, err
	}
	return url, drop, nil
}

// manyLocks: the uncontended try and release with 1,000 and with 1,000,000 other live locks, in
// two databases on one server (and two Redis databases) measured in the same rounds.
func manyLocks(ctx context.Context, e *env, r *report, say func(string, ...any)) error {
	var designs []design
	for _, d := range e.designs {
		// Advisory locks have no rows: nothing to grow. Of the Redis designs, one stands for
		// all: a key among many costs every Redis lock the same.
		if d.name != advisoryDesign.name && (d.redisNodes == nil || d.name == redisDesign.name) {
			designs = append(designs, d)
		}
	}
	bigURL, dropBig, err := siblingDatabase(ctx, e.url)
	if err != nil {
		return err
	}
	defer dropBig()
	var lockers [2][]locker
	for size, rows := range []int{1_000, 1_000_000} {
		sized := *e
		if size == 1 {
			sized.url = bigURL
		}
		ls, closeAll, err := instances(ctx, &sized, designs, 4)
		if err != nil {
			return err
		}
		defer closeAll()
		lockers[size] = ls
		say("filling %d live locks per design", rows)
		pool, err := newPool(ctx, sized.url, 2)
		if err != nil {
			return err
		}
		err = fillPostgres(ctx, pool, rows)
		pool.Close()
		if err != nil {
			return err
		}
		for i, d := range designs {
			if d.name == redisDesign.name {
				redisDB := 14 + size
				cleanup, err := fillRedis(ctx, e.redisAddr, redisDB, rows)
				defer cleanup()
				if err != nil {
					return err
				}
				lockers[size][i].close()
				lockers[size][i] = newRedisLocker(e.redisAddr, redisDB)
			}
		}
	}
	n := len(designs)
	results, err := interleave(ctx, 2*n, 1500, 30*time.Second, func(i int) error {
		size, d := i/n, i%n
		release, err := lockers[size][d].try(ctx, fmt.Sprint("among-many-", d))
		if err != nil {
			return r.failed("acquire among many live locks", designs[d], err)
		}
		return release(ctx)
	})
	if err != nil {
		return err
	}
	r.manyLocksTable(designs, results[:n], results[n:])
	return nil
}

// waitersResult is what 1,000 waiters on one name did with a design, summed over rounds.
type waitersResult struct {
	design      string
	served      int
	elapsed     time.Duration
	connections int // the most connections (or Redis clients) the design had open at once
	requests    int // statements (Redis commands) the server ran from the release on
}

func (r *waitersResult) add(other waitersResult) {
	r.served += other.served
	r.elapsed += other.elapsed
	r.connections = max(r.connections, other.connections)
	r.requests += other.requests
}

const (
	statsTimeout   = 10 * time.Second // a read of the server's counters
	waiters        = 1000
	waitersRounds  = 2
	waitersPool    = 20 // connections each design may use, Redis clients included
	waitersTimeout = 10 * time.Second
)

// thousandWaiters: one process, 1,000 goroutines waiting for one name; the holder lets go and
// each waiter takes the lock once and lets go at once; designs in turn, in rounds. What it costs
// the server: connections, and requests per acquisition from the release on, read from
// PostgreSQL's statistics (transactions, which backends flush when they exit) or Redis's INFO.
func thousandWaiters(ctx context.Context, e *env, r *report, say func(string, ...any)) error {
	stats, err := pgx.Connect(ctx, maintenanceURL(e.url))
	if err != nil {
		return err
	}
	defer stats.Close(context.Background())
	results := make([]waitersResult, len(e.designs))
	for i, d := range e.designs {
		results[i].design = d.name
	}
	for round := range waitersRounds {
		for k := range e.designs {
			i := (round + k) % len(e.designs)
			res, err := waitersRun(ctx, e, e.designs[i], stats, r)
			if err != nil {
				if err := r.failed("1,000 waiters", e.designs[i], err); !errors.Is(err, errPeerFailed) {
					return err
				}
				say("%s: failed: %v", e.designs[i].name, err)
				continue // its counts are partial: its failures are on the page instead
			}
			say("%s: %d served in %s", e.designs[i].name, res.served, res.elapsed.Round(time.Millisecond))
			results[i].add(res)
		}
	}
	r.waitersTable(results)
	return nil
}

// maintenanceURL is dbURL on the postgres database, so that sampling the server does not count
// as the benchmark database's work.
func maintenanceURL(dbURL string) string { return withDatabase(dbURL, "postgres") }

// withDatabase is dbURL on database name.
func withDatabase(dbURL, name string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	u.Path = "/" + name
	return u.String()
}

// counters reads what the server has done for the benchmark database so far (statements, or
// Redis commands) and how many connections (Redis clients) are open to it.
type counters func(ctx context.Context) (requests, connections int, err error)

// serverCounters reads PostgreSQL's statistics through stats, a connection to another database,
// or, for the Redis design, Redis's INFO through a client of its own (whose INFO commands the
// caller discounts).
func serverCounters(e *env, d design, stats *pgx.Conn, dbName string) (counters, func()) {
	if d.redisNodes != nil {
		var clients []*redis.Client
		for _, addr := range d.redisNodes(e) {
			clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1}))
		}
		return func(ctx context.Context) (requests, connections int, err error) {
				for _, client := range clients {
					info, err := client.Info(ctx, "stats", "clients").Result()
					if err != nil {
						return 0, 0, err
					}
					for line := range strings.Lines(info) {
						var n int
						line = strings.TrimSpace(line)
						if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
							fmt.Sscan(v, &n)
							requests += n
						}
						if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
							fmt.Sscan(v, &n)
							connections += n
						}
					}
				}
				return requests, connections, nil
			}, func() {
				for _, client := range clients {
					client.Close()
				}
			}
	}
	var mu sync.Mutex // stats is one connection, shared by the sampler and the caller
	return func(ctx context.Context) (requests, connections int, err error) {
		mu.Lock()
		defer mu.Unlock()
		// Never canceled mid-query (as the sampler's context is when it stops): pgx closes a
		// connection whose query is canceled, and this one serves the whole scenario; every
		// later read failed with "conn closed", blamed on whichever design ran next.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statsTimeout)
		defer cancel()
		err = stats.QueryRow(ctx, `SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1),
			(SELECT count(*) FROM pg_stat_activity WHERE datname = $1)`, dbName).Scan(&requests, &connections)
		return requests, connections, err
	}, func() {}
}

// A peer's waiters that fail are recorded (r.failed), and those that succeeded counted.
func waitersRun(ctx context.Context, e *env, d design, stats *pgx.Conn, r *report) (waitersResult, error) {
	res := waitersResult{design: d.name}
	var dbName string
	if err := e.admin.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		return res, harness(err)
	}
	read, closeCounters := serverCounters(e, d, stats, dbName)
	defer closeCounters()
	// No connection of an earlier run or of the set-up pool may count as the design's.
	e.admin.Reset()
	var connectionsBefore int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var err error
		if _, connectionsBefore, err = read(ctx); err != nil {
			return res, harness(err)
		}
		if d.redisNodes != nil || connectionsBefore == 0 || time.Now().After(deadline) {
			break
		}
	}
	pool, err := newPool(ctx, e.url, waitersPool)
	if err != nil {
		return res, harness(err)
	}
	defer pool.Close()
	holder, err := d.open(ctx, e, pool)
	if err != nil {
		return res, err
	}
	release, err := holder.acquire(ctx, "waited-for") // a free name: every design takes it at once
	if err != nil {
		holder.close()
		return res, err
	}
	// The waiters share the holder's handle, unless a handle waits for one name at a time (a
	// pinned session): then each opens its own and closes it when done, giving back its
	// connection.
	shared := holder
	if d.oneWaiterPerHandle {
		if shared, err = d.open(ctx, e, pool); err != nil {
			holder.close()
			return res, err
		}
	}

	run, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		served, peak atomic.Int64
		samples      atomic.Int64
		wg, sampler  sync.WaitGroup
		errsMu       sync.Mutex
		errs         []error
	)
	fail := func(err error) {
		if run.Err() == nil {
			errsMu.Lock()
			errs = append(errs, err)
			errsMu.Unlock()
		}
	}
	sampling, stopSampling := context.WithCancel(ctx)
	sampler.Go(func() {
		for sampling.Err() == nil {
			if _, c, err := read(sampling); err == nil {
				peak.Store(max(peak.Load(), int64(c)))
				samples.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	for w := range waiters {
		wg.Go(func() {
			l := shared
			if d.oneWaiterPerHandle && w > 0 {
				var err error
				if l, err = d.open(run, e, pool); err != nil {
					fail(err)
					return
				}
				defer l.close()
			}
			rel, err := l.acquire(run, "waited-for")
			if err != nil {
				fail(err)
				return
			}
			served.Add(1)
			if err := rel(context.Background()); err != nil {
				fail(err)
			}
		})
	}
	time.Sleep(time.Second) // let them all queue
	requestsBefore, _, err := read(ctx)
	if err != nil {
		cancel()
		wg.Wait()
		stopSampling()
		sampler.Wait()
		return res, harness(err)
	}
	samplesBefore := samples.Load()
	start := time.Now()
	timeout := time.AfterFunc(waitersTimeout, cancel) // waiters left then are not served
	defer timeout.Stop()
	releaseErr := release(ctx)
	wg.Wait()
	res.elapsed = time.Since(start)
	res.served = int(served.Load())
	stopSampling()
	sampler.Wait()
	holder.close()
	if shared != holder {
		shared.close()
	}
	pool.Close()
	if releaseErr != nil {
		return res, releaseErr
	}
	time.Sleep(500 * time.Millisecond) // backends flush their statistics as they exit
	requestsAfter, _, err := read(ctx)
	if err != nil {
		return res, harness(err)
	}
	for _, err := range errs {
		if err := r.failed("1,000 waiters", d, err); !errors.Is(err, errPeerFailed) {
			return res, fmt.Errorf("%d waiters failed, the first with: %w", len(errs), errs[0])
		}
	}
	res.requests = requestsAfter - requestsBefore
	if d.redisNodes != nil { // the sampler's INFO commands, and the last read's, on each node
		res.requests -= (int(samples.Load()-samplesBefore) + 1) * len(d.redisNodes(e))
	}
	res.connections = int(peak.Load()) - connectionsBefore
	return res, nil
}
