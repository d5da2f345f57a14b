package tablelock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

func lockRes(name string) tablelock.Resource { return tablelock.Resource{Lock: name} }

func placesRes(name string, p tablelock.Places) tablelock.Resource {
	return tablelock.Resource{Semaphore: name, Places: p}
}

// A combined try takes everything or nothing: refused by a held lock that comes after a free
// semaphore in the canonical order, it undoes the place it took; once that lock is free it takes
// both, each with its own token, and one Release gives both back.
func TestCombinedTryTakesAllOrNothingAndReleasesAll(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	other, err := l.TryAcquire(ctx, "zz-ledger", nil) // after "pglock.semaphore/exports"
	require.NoError(t, err)

	both := []tablelock.Resource{placesRes("exports", tablelock.Places{Permits: 4, Take: 3, Key: "tenant-a"}), lockRes("zz-ledger")}
	_, err = l.TryAcquireAll(ctx, both, nil)
	require.ErrorIs(t, err, pglock.ErrLocked)
	require.ErrorContains(t, err, `"zz-ledger"`)
	locks, waiters := countRows(t, pool)
	require.Equal(t, 1, locks, "only the other holder's lock: no place of the semaphore was kept")
	require.Zero(t, waiters, "a try queues nowhere")

	require.NoError(t, other.Release(ctx))
	ls, err := l.TryAcquireAll(ctx, both, nil)
	require.NoError(t, err)
	held := ls.Held()
	require.Len(t, held, 2)
	require.Equal(t, "exports", held[0].Semaphore)
	require.Equal(t, 3, held[0].Places.Take)
	require.Equal(t, "zz-ledger", held[1].Name)
	require.Greater(t, held[1].Token, other.Token(), "a new token for the lock")
	require.NotEqual(t, held[0].Token, held[1].Token)
	for _, h := range held {
		row, ok := readLock(t, pool, h.Name)
		require.True(t, ok, h.Name)
		require.Equal(t, h.Token, row.Token)
		require.True(t, row.Live)
	}
	var places int
	require.NoError(t, pool.QueryRow(ctx, `SELECT places FROM distributed_locks WHERE lock_name = $1`, held[0].Name).Scan(&places))
	require.Equal(t, 3, places)

	// Fenced together, in one statement.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ls.Fence(ctx, tx) }))
	require.Equal(t, 1, l.Stats().Held)

	require.NoError(t, ls.Release(ctx))
	locks, waiters = countRows(t, pool)
	require.Zero(t, locks+waiters, "everything went back")
	require.ErrorIs(t, ls.Release(ctx), pglock.ErrNotHeld)
	require.Zero(t, l.Stats().Held)
	select {
	case <-ls.Lost():
		t.Fatal("released, not lost")
	default:
	}
}

// A waiting combined acquisition is ordered locking: it holds what comes before the resource
// that refused it, renewed by its polls, and keeps a place only in that one's queue; handed that
// resource by its release, it holds everything.
func TestCombinedWaiterHoldsWhatComesBeforeAndQueuesWhereRefused(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	opts := &tablelock.AcquireOptions{TTL: 3 * time.Second}
	holdsB, err := l.TryAcquire(ctx, "b", opts)
	require.NoError(t, err)
	type result struct {
		ls  *tablelock.Locks
		err error
	}
	done := make(chan result, 1)
	go func() {
		ls, err := l.AcquireAll(ctx, []tablelock.Resource{lockRes("b"), placesRes("p", tablelock.Places{Permits: 1}), lockRes("a")}, opts)
		done <- result{ls, err}
	}()
	var waiter string
	testdb.WaitFor(t, func() bool {
		return pool.QueryRow(ctx, `SELECT holder_id FROM distributed_lock_waiters WHERE lock_name = 'b'`).Scan(&waiter) == nil
	}, "the combined waiter queues for b")
	a, held := readLock(t, pool, "a")
	require.True(t, held && a.Holder == waiter, "a, before b, is the waiter's")
	var elsewhere int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM distributed_lock_waiters WHERE lock_name <> 'b')
		+ (SELECT count(*) FROM distributed_locks WHERE lock_name LIKE 'pglock.semaphore/p/%')`).Scan(&elsewhere))
	require.Zero(t, elsewhere, "the place of p, after b, is neither taken nor queued for")
	// Its polls keep a beyond its TTL.
	require.NoError(t, testdb.Moved(testdb.Context(t), pool, `SELECT expires_at FROM distributed_locks WHERE lock_name = 'a'`))
	require.NoError(t, testdb.Moved(testdb.Context(t), pool, `SELECT expires_at FROM distributed_locks WHERE lock_name = 'a'`))

	require.NoError(t, holdsB.Release(ctx)) // handed to the waiter
	r := testdb.Receive(t, done)
	require.NoError(t, r.err)
	held2 := r.ls.Held()
	require.Equal(t, []string{"b", tablelock.SemaphorePrefix + "p/" + waiter, "a"}, []string{held2[0].Name, held2[1].Name, held2[2].Name})
	require.Equal(t, a.Token, held2[2].Token, "a kept its token while the waiter held it")
	require.NoError(t, r.ls.Release(ctx))
	locks, waiters := countRows(t, pool)
	require.Zero(t, locks+waiters)
}

// A poll refused by a resource it held before (lost, and taken by another) gives up, in order,
// what comes after it: a lock handed to it goes on to that lock's next waiter. (In SQL: the
// order of events is the test's to set.)
func TestCombinedPollHandsOnWhatComesAfterTheResourceThatRefusedIt(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	poll := func(holder string) (acquired bool, waitingFor string) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT acquired, coalesce(waiting_for, '') FROM pglock_take_all($1,
			ARRAY['a', 'b'], ARRAY[NULL, NULL]::integer[], ARRAY[NULL, NULL]::integer[], ARRAY[NULL, NULL]::varchar[],
			ARRAY[NULL, NULL]::integer[], 30000, '{}', 'i', true)`, holder).Scan(&acquired, &waitingFor))
		return acquired, waitingFor
	}
	exec := func(sql string, args ...any) {
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`SELECT acquire_lock_ms('b', 'other', 30000)`)
	acquired, waitingFor := poll("x")
	require.False(t, acquired)
	require.Equal(t, "b", waitingFor, "x holds a and waits for b")
	exec(`SELECT * FROM pglock_attempt('b', 'y', 30000, '{}', 'i', true)`) // y queues for b behind x
	exec(`SELECT force_release_lock('a')`)
	exec(`SELECT acquire_lock_ms('a', 'thief', 30000)`)
	exec(`SELECT pglock_release('b', 'other')`) // b is handed to x
	b, _ := readLock(t, pool, "b")
	require.Equal(t, "x", b.Holder)

	acquired, waitingFor = poll("x")
	require.False(t, acquired)
	require.Equal(t, "a", waitingFor, "x lost a: it waits for a again")
	b, _ = readLock(t, pool, "b")
	require.Equal(t, "y", b.Holder, "b, after a, went on to its next waiter")
	var places []string
	rows, err := pool.Query(ctx, `SELECT lock_name FROM distributed_lock_waiters WHERE holder_id = 'x' ORDER BY 1`)
	require.NoError(t, err)
	places, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, places, "x's one place is in a's queue")
}

// Losing any resource is signalled once, on the Locks, and what is still held goes back at once.
func TestCombinedLossIsSignalledAndGivesBackTheRest(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	ls, err := l.TryAcquireAll(ctx, []tablelock.Resource{lockRes("first"), placesRes("pool", tablelock.Places{Permits: 2})}, nil)
	require.NoError(t, err)
	_, err = tablelock.ForceRelease(ctx, pool, "first", nil)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return ls.Fence(ctx, tx) })
	require.ErrorIs(t, err, pglock.ErrLockLost)
	<-ls.Lost()
	require.ErrorIs(t, ls.Err(), pglock.ErrLockLost)
	testdb.WaitFor(t, func() bool {
		locks, _ := countRows(t, pool)
		return locks == 0
	}, "the semaphore's place goes back with the lock's loss")
	require.ErrorIs(t, ls.Release(ctx), pglock.ErrLockLost)
	require.Zero(t, l.Stats().Held)
}

// A combined wait that is canceled or times out leaves no place and holds nothing.
func TestCombinedWaitGivenUpLeavesNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	held, err := l.TryAcquireSemaphore(ctx, "slots", 1, nil)
	require.NoError(t, err)
	_, err = l.AcquireAll(ctx, []tablelock.Resource{lockRes("z"), placesRes("slots", tablelock.Places{Permits: 1})},
		&tablelock.AcquireOptions{WaitTimeout: 200 * time.Millisecond})
	require.ErrorIs(t, err, pglock.ErrLockTimeout)
	require.NoError(t, held.Release(ctx))
	testdb.WaitFor(t, func() bool {
		locks, waiters := countRows(t, pool)
		return locks+waiters == 0
	}, "no place and no lock is left behind")
}

// Bad input is refused with a typed error, and writes nothing.
func TestCombinedBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	many := make([]tablelock.Resource, tablelock.MaxResources+1)
	for i := range many {
		many[i] = lockRes(fmt.Sprintf("l%d", i))
	}
	sem := func(p tablelock.Places) tablelock.Resource { return placesRes("s", p) }
	for _, tc := range []struct {
		name string
		rs   []tablelock.Resource
		want error
	}{
		{"no resource", nil, pglock.ErrInvalidArgument},
		{"too many", many, pglock.ErrInvalidArgument},
		{"a lock twice", []tablelock.Resource{lockRes("x"), lockRes("x")}, pglock.ErrInvalidArgument},
		{"a semaphore twice", []tablelock.Resource{sem(tablelock.Places{Permits: 2}), sem(tablelock.Places{Permits: 3})}, pglock.ErrInvalidArgument},
		{"neither lock nor semaphore", []tablelock.Resource{{}}, pglock.ErrInvalidArgument},
		{"both", []tablelock.Resource{{Lock: "x", Semaphore: "s", Places: tablelock.Places{Permits: 1}}}, pglock.ErrInvalidArgument},
		{"a lock with places", []tablelock.Resource{{Lock: "x", Places: tablelock.Places{Permits: 1}}}, pglock.ErrInvalidArgument},
		{"more places than permits", []tablelock.Resource{lockRes("x"), sem(tablelock.Places{Permits: 2, Take: 3})}, pglock.ErrInvalidArgument},
		{"negative places", []tablelock.Resource{sem(tablelock.Places{Permits: 2, Take: -1})}, pglock.ErrInvalidArgument},
		{"places over the key's cap", []tablelock.Resource{sem(tablelock.Places{Permits: 4, Take: 3, PerKey: 2})}, pglock.ErrInvalidArgument},
		{"a lock named as a semaphore's row", []tablelock.Resource{lockRes(tablelock.SemaphorePrefix + "s/h")}, pglock.ErrInvalidName},
		{"an empty-looking bad name", []tablelock.Resource{lockRes("ok"), lockRes("bad\x00")}, pglock.ErrInvalidName},
		{"a semaphore name with '/'", []tablelock.Resource{placesRes("a/b", tablelock.Places{Permits: 1})}, pglock.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.TryAcquireAll(ctx, tc.rs, nil)
			require.ErrorIs(t, err, tc.want)
			_, err = l.AcquireAll(ctx, tc.rs, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
	locks, waiters := countRows(t, pool)
	require.Zero(t, locks+waiters, "nothing was written")
}

// Combined acquisitions of overlapping locks and semaphores, each listing its resources in a
// random order, from 4 Lockers whose backends are killed every 200 ms: every one completes
// (none waits for another in a cycle, and no statement deadlocked), and the fenced writes under them never see a lock held
// twice, or a semaphore over its places or a key over its cap.
func TestCombinedAcquisitionsInAnyOrderNeverDeadlockNorOverfill(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a deadlock would wait forever
	defer cancel()
	_, err := d.Pool.Exec(ctx, `
		CREATE TABLE inside (resource text NOT NULL, token bigint NOT NULL, PRIMARY KEY (resource, token));
		CREATE TABLE seen (resource text NOT NULL, n int NOT NULL)`)
	require.NoError(t, err)
	const app = "combined-chaos"
	type instance struct {
		pool   *pgxpool.Pool
		locker *tablelock.Locker
	}
	var instances []instance
	for range 4 {
		p := d.NewPool(t, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["application_name"] = app
			c.MaxConns = 4
		})
		instances = append(instances, instance{p, newLocker(t, p, nil)})
	}
	capacity := map[string]int{"lock:a": 1, "lock:b": 1, "lock:c": 1, "sem:gpu": 2}
	resources := func(r *rand.Rand, tenant string) []tablelock.Resource {
		all := []tablelock.Resource{lockRes("a"), lockRes("b"), lockRes("c"),
			placesRes("gpu", tablelock.Places{Permits: 2}),
			placesRes("tenants", tablelock.Places{Permits: 3, Key: tenant, PerKey: 1})}
		r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		return all[:2+r.IntN(2)]
	}
	key := func(h tablelock.Held) string {
		switch {
		case h.Lock != "":
			return "lock:" + h.Lock
		case h.Semaphore == "tenants":
			return "tenant:" + h.Places.Key
		}
		return "sem:" + h.Semaphore
	}
	opts := &tablelock.AcquireOptions{TTL: 10 * time.Second} // the kills must not make leases run out
	// Each step is idempotent: a kill can end a transaction that committed, and it is retried.
	visit := func(p *pgxpool.Pool, ls *tablelock.Locks) error {
		each := func(statements ...string) error {
			return retriedThroughKills(func() error {
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					if err := ls.Fence(ctx, tx); err != nil {
						return err
					}
					for _, h := range ls.Held() {
						for _, sql := range statements {
							if _, err := tx.Exec(ctx, sql, key(h), h.Token); err != nil {
								return err
							}
						}
					}
					return nil
				})
			})
		}
		if err := each(`INSERT INTO inside VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			`INSERT INTO seen SELECT $1, count(*) FROM inside WHERE resource = $1 AND $2::bigint IS NOT NULL`); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
		return each(`DELETE FROM inside WHERE resource = $1 AND token = $2`)
	}

	deadlocks := func() (n int64) {
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		return n
	}
	deadlocksBefore := deadlocks()
	stopKilling := killEvery200ms(ctx, d.Pool, app)
	var wg sync.WaitGroup
	var acquired, lost atomic.Int64
	errs := make(chan error, 64)
	for g := range 24 {
		in := instances[g%len(instances)]
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			tenant := fmt.Sprintf("t%d", g%4)
			for range 6 {
				ls, err := in.locker.AcquireAll(ctx, resources(r, tenant), opts)
				if err != nil {
					errs <- err
					return
				}
				acquired.Add(1)
				if err := visit(in.pool, ls); errors.Is(err, pglock.ErrLockLost) {
					lost.Add(1) // a renewal the kills kept out for the whole lease: signalled, not a failure
				} else if err != nil {
					errs <- err
					return
				}
				ls.Release(ctx) // a kill can cut it short: it is then retried in the background
			}
		})
	}
	wg.Wait()
	kills := stopKilling()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 24*6, acquired.Load(), "every combined acquisition completed")
	require.Positive(t, kills)

	rows, err := d.Pool.Query(ctx, `SELECT resource, max(n) FROM seen GROUP BY resource ORDER BY resource`)
	require.NoError(t, err)
	most, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		Resource string
		N        int
	}])
	require.NoError(t, err)
	t.Logf("%d acquisitions, %d lost, %d kills; most inside: %v", acquired.Load(), lost.Load(), kills, most)
	for _, m := range most {
		want, ok := capacity[m.Resource]
		if !ok {
			want = 1 // a tenant's cap
		}
		require.LessOrEqual(t, m.N, want, m.Resource)
	}
	for _, in := range instances {
		require.NoError(t, in.locker.Close(ctx))
	}
	waitUntilNothingLive(t, d.Pool, "nothing is left held or queued")
	// Retried, a deadlock between statements would go unseen but for PostgreSQL's count.
	require.Equal(t, deadlocksBefore, deadlocks(), "no statement was in a deadlock")
}

// Close gives back what combined acquisitions hold, before it returns, and tells each its loss.
func TestCloseGivesBackCombinedAcquisitions(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	ls, err := l.TryAcquireAll(ctx, []tablelock.Resource{lockRes("m"), placesRes("n", tablelock.Places{Permits: 3, Take: 2})}, nil)
	require.NoError(t, err)
	require.NoError(t, l.Close(ctx))
	<-ls.Lost()
	require.ErrorIs(t, ls.Err(), pglock.ErrClosed)
	locks, waiters := countRows(t, pool)
	require.Zero(t, locks+waiters, "Close released every row")
}
