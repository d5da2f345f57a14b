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

// A waiter for 3 of 10 places is not overtaken by a stream of 1-place requests of its key that
// queue after it, though there is room for them and not for it: it is admitted first, as soon
// as 3 places are free.
func TestPlacesOfAKeyAreServedInArrivalOrderWhateverTheirWeight(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	one := tablelock.Places{Permits: 10}
	var held []*tablelock.Lock
	for range 9 {
		lk, err := l.TryAcquirePlaces(ctx, "w", one, nil)
		require.NoError(t, err)
		held = append(held, lk)
	}
	heavy := make(chan *tablelock.Lock, 1)
	go func() {
		lk, err := l.AcquirePlaces(ctx, "w", tablelock.Places{Permits: 10, Take: 3}, nil)
		if err != nil {
			t.Error(err)
		}
		heavy <- lk
	}()
	waiters := func() (n int) {
		d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/w'`).Scan(&n)
		return n
	}
	testdb.WaitFor(t, func() bool { return waiters() == 1 }, "the heavy waiter is queued")
	_, err := l.TryAcquirePlaces(ctx, "w", one, nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "the free place is kept for the waiter ahead")

	// The stream: 1-place requests, each holding its place a moment, until the heavy one is in.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var stream sync.WaitGroup
	tokens := make(chan int64, 1000)
	for range 6 {
		stream.Go(func() {
			for ctx.Err() == nil {
				lk, err := l.AcquirePlaces(ctx, "w", one, nil)
				if err != nil {
					return
				}
				tokens <- lk.Token()
				time.Sleep(5 * time.Millisecond)
				lk.Release(context.Background())
			}
		})
	}
	testdb.WaitFor(t, func() bool { return waiters() == 7 }, "the stream is queued behind the heavy waiter")
	for _, lk := range held[:2] { // 2, then 3 places free: only the second lets the heavy one in
		require.NoError(t, lk.Release(ctx))
	}
	lk := testdb.Receive(t, heavy)
	require.NotNil(t, lk)
	for _, free := range held[2:] {
		require.NoError(t, free.Release(ctx))
	}
	testdb.WaitFor(t, func() bool { return len(tokens) >= 20 }, "the stream goes on once places are free")
	stop()
	stream.Wait()
	close(tokens)
	for token := range tokens {
		require.Greater(t, token, lk.Token(), "a 1-place request queued after the heavy waiter was admitted before it")
	}
	require.NoError(t, lk.Release(context.Background()))
}

// Tenant A queues 2,000 waiters, then tenants B and C queue 20 each, on a semaphore of 8 places
// with at most 4 a tenant, from 4 Lockers (instances) whose backends are killed every 200 ms.
// Each of B's and C's waiters is served after a few of A's grants, in turn with A, never behind
// A's queue; and the database, through fenced visits, never saw more than 8 inside, nor more
// than 4 of a tenant.
func TestPlacesAreSharedInTurnAcrossKeys(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `
		CREATE TABLE visits (token bigint PRIMARY KEY, tenant text NOT NULL, entered timestamptz NOT NULL, left_at timestamptz);
		-- before: the last grant when the waiter began waiting
		CREATE TABLE grants (token bigint PRIMARY KEY, tenant text NOT NULL, before bigint NOT NULL)`)
	require.NoError(t, err)
	const app = "fair-share"
	var lockers []*tablelockPool
	for range 4 {
		p := d.NewPool(t, func(c *pgxpool.Config) {
			c.ConnConfig.RuntimeParams["application_name"] = app
			c.MaxConns = 4 // 4 pools beside the other tests', under max_connections: a Locker polls a semaphore on one
		})
		lockers = append(lockers, &tablelockPool{pool: p, locker: newLocker(t, p, nil)})
	}
	share := func(tenant string) tablelock.Places {
		return tablelock.Places{Permits: 8, Key: tenant, PerKey: 4}
	}
	// Places live 10 s: kills every 200 ms make renewals retry, and a busy machine must not
	// make them run out (a place lost is a visit the database would refuse).
	opts := &tablelock.AcquireOptions{TTL: 10 * time.Second}
	// Statements the kills may end are tried again.
	// A visit writes, in one fenced transaction, when it entered and left: the rows of the
	// visits that committed tell who was inside when, by the database's clock.
	visit := func(p *tablelockPool, lk *tablelock.Lock, tenant string) error {
		return retriedThroughKills(func() error {
			return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
				if err := lk.Fence(ctx, tx); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO visits VALUES ($1, $2, clock_timestamp())`, lk.Token(), tenant); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.1)`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE visits SET left_at = clock_timestamp() WHERE token = $1`, lk.Token())
				return err
			})
		})
	}
	var wg sync.WaitGroup
	var kept atomic.Int64
	wait := func(waitCtx context.Context, tenant string, waiter int) {
		p := lockers[waiter%len(lockers)]
		wg.Go(func() {
			var (
				before int64
				lk     *tablelock.Lock
				err    error
			)
			for {
				if err = retriedThroughKills(func() error {
					return p.pool.QueryRow(ctx, `SELECT coalesce(max(token), 0) FROM grants`).Scan(&before)
				}); err != nil {
					break
				}
				lk, err = p.locker.AcquirePlaces(waitCtx, "tenants", share(tenant), opts)
				if !errors.Is(err, pglock.ErrSaturated) || waitCtx.Err() != nil {
					break
				}
				// The Locker's renewals fell behind (2,000 waiters and the kills on a busy
				// machine): it queues no one until they catch up, and the waiter tries again, as
				// a caller would; its wait in the queue counts from then.
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				if waitCtx.Err() == nil {
					t.Errorf("%s's waiter %d: %v", tenant, waiter, err)
				}
				return
			}
			defer lk.Release(context.Background())
			if err := retriedThroughKills(func() error {
				_, err := p.pool.Exec(ctx, `INSERT INTO grants VALUES ($1, $2, $3)`, lk.Token(), tenant, before)
				return err
			}); err != nil {
				t.Errorf("recording %s's grant: %v", tenant, err)
			}
			if err := visit(p, lk, tenant); err != nil {
				kept.Add(1) // a visit the kills kept out five times in a row: counted, not a failure
			}
		})
	}
	queued := func(tenant string) (n int) {
		d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters
			WHERE lock_name = 'pglock.semaphore/tenants' AND semaphore_key = $1`, tenant).Scan(&n)
		return n
	}
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	for i := range 2000 {
		wait(aCtx, "A", i)
	}
	testdb.WaitFor(t, func() bool { return queued("A") >= 1900 }, "A's waiters are queued")

	stopKilling := killEvery200ms(ctx, d.Pool, app)
	for i := range 20 {
		wait(ctx, "B", i)
		wait(ctx, "C", i)
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // arrivals spread a little
	}
	served := func() (n int) {
		d.Pool.QueryRow(ctx, `SELECT count(*) FROM grants WHERE tenant <> 'A'`).Scan(&n)
		return n
	}
	testdb.WaitFor(t, func() bool { return served() == 40 }, "every one of B's and C's waiters is served")
	kills := stopKilling()
	stopA()
	wg.Wait()

	var order string
	var mostWaited int
	require.NoError(t, d.Pool.QueryRow(ctx, `
		SELECT (SELECT string_agg(tenant, '' ORDER BY token) FROM grants
		         WHERE token > (SELECT min(before) FROM grants WHERE tenant <> 'A')
		           AND token <= (SELECT max(token) FROM grants WHERE tenant <> 'A')),
		       (SELECT max((SELECT count(*) FROM grants a WHERE a.tenant = 'A' AND a.token > g.before AND a.token < g.token))
		          FROM grants g WHERE g.tenant <> 'A')`).Scan(&order, &mostWaited))
	t.Logf("served since B and C queued (%d kills): %s", kills, order)
	require.LessOrEqual(t, mostWaited, 60, "a waiter of B or C waited behind this many of A's grants, with 1,900 of A's queued ahead of it")
	require.Positive(t, kills)

	var most, mostOfATenant, visits int
	require.NoError(t, d.Pool.QueryRow(ctx, `
		SELECT max(inside), max(inside_of_tenant), count(*)
		  FROM (SELECT (SELECT count(*) FROM visits w WHERE w.entered <= v.entered AND w.left_at > v.entered) AS inside,
		               (SELECT count(*) FROM visits w WHERE w.tenant = v.tenant AND w.entered <= v.entered AND w.left_at > v.entered) AS inside_of_tenant
		          FROM visits v) AS at_each_entry`).Scan(&most, &mostOfATenant, &visits))
	t.Logf("%d visits (%d kept out by kills); at most %d inside, %d of a tenant", visits, kept.Load(), most, mostOfATenant)
	require.LessOrEqual(t, most, 8)
	require.LessOrEqual(t, mostOfATenant, 4)
	require.Greater(t, visits, 40)

	// No place is left behind: once every Locker has closed, none is held and none queued.
	for _, p := range lockers {
		require.NoError(t, p.locker.Close(ctx))
	}
	waitUntilNothingLive(t, d.Pool, "no place held or queued is left")
}

// A poll names every other waiter that fits now, so that their Lockers wake them: both waiters
// when two places free at once, and a waiter behind the queue's first rows when those are all of
// a key at its cap. A newcomer's turn is no earlier than the latest turn admitted, so a waiter
// passed over at the front does not let every new key in ahead of those already queued.
func TestSemaphorePollsNameTheWaitersThatFitAndTurnsMoveOn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	take := func(sem, holder, key string, permits, perKey int) (acquired bool, next []string) {
		t.Helper()
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT acquired, coalesce(next_holder_ids, '{}')
			FROM pglock_semaphore_take($1, $2, 1, $3, $4, nullif($5, 0), 600000, '{}', 'test', true)`,
			sem, holder, permits, key, perKey).Scan(&acquired, &next))
		return acquired, next
	}
	release := func(sem, holder string) {
		t.Helper()
		_, err := d.Pool.Exec(ctx, `SELECT pglock_release('pglock.semaphore/' || $1 || '/' || $2, $2)`, sem, holder)
		require.NoError(t, err)
	}

	for i := range 6 {
		take("two", fmt.Sprint("h", i), "", 3, 0)
	}
	release("two", "h0")
	release("two", "h1")
	_, next := take("two", "h5", "", 3, 0)
	require.Equal(t, []string{"h3", "h4"}, next, "both waiters that fit now")

	for i := range 200 { // 4 of A's in, 196 queued and passed over: A is at its cap
		take("deep", fmt.Sprint("a", i), "A", 8, 4)
	}
	_, err := d.Pool.Exec(ctx, `INSERT INTO distributed_lock_waiters (lock_name, holder_id, ttl_ms, enqueued_at, expires_at, places, semaphore_key, turn)
		VALUES ('pglock.semaphore/deep', 'z', 600000, now(), now() + interval '10 minutes', 1, 'Z', 500)`) // a turn that came late
	require.NoError(t, err)
	_, next = take("deep", "a4", "A", 8, 4)
	require.Equal(t, []string{"z"}, next, "the waiter that fits, behind the first rows")

	// 4 places, 2 a key: A's third waiter is passed over at the front, at turn 0, while B's
	// queue is served, at turns 0, 1 and 2.
	for _, h := range []string{"a0", "a1", "a2"} {
		take("turns", h, "A", 4, 2)
	}
	for i := range 8 {
		take("turns", fmt.Sprint("b", i), "B", 4, 2)
	}
	for i := range 3 {
		release("turns", fmt.Sprint("b", i))
		acquired, _ := take("turns", fmt.Sprint("b", i+2), "B", 4, 2)
		require.True(t, acquired)
	}
	take("turns", "u", "U", 4, 2)
	var front, newcomer, latest int64
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT
		(SELECT turn FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/turns' AND holder_id = 'a2'),
		(SELECT turn FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/turns' AND holder_id = 'u'),
		(SELECT max(turn + places) FROM distributed_locks WHERE lock_name LIKE 'pglock.semaphore/turns/%')`).Scan(&front, &newcomer, &latest))
	require.Less(t, front, latest, "B's admissions moved the turns on")
	require.Equal(t, latest, newcomer, "the newcomer's turn follows the latest admitted, not the front's")
}

// killEvery200ms terminates one random backend of the application app every 200 ms until the
// returned stop is called; stop returns how many it killed.
func killEvery200ms(ctx context.Context, pool *pgxpool.Pool, app string) (stop func() int64) {
	killing, stopKilling := context.WithCancel(ctx)
	var killer sync.WaitGroup
	var kills atomic.Int64
	killer.Go(func() {
		for killing.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			var n int64
			pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
				WHERE datname = current_database() AND application_name = $1 ORDER BY random() LIMIT 1) AS victim`, app).Scan(&n)
			kills.Add(n)
		}
	})
	return func() int64 {
		stopKilling()
		killer.Wait()
		return kills.Load()
	}
}

// retriedThroughKills runs f up to 5 times while it fails, as statements the kills end are
// tried again; a loss is final.
func retriedThroughKills(f func() error) (err error) {
	for range 5 {
		if err = f(); err == nil || errors.Is(err, pglock.ErrLockLost) {
			return err
		}
	}
	return err
}

// waitUntilNothingLive waits until no lock or place is held and none queued, as msg says.
func waitUntilNothingLive(t *testing.T, pool *pgxpool.Pool, msg string) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		var live int
		pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM distributed_locks WHERE expires_at > clock_timestamp())
			+ (SELECT count(*) FROM distributed_lock_waiters WHERE expires_at > clock_timestamp())`).Scan(&live)
		return live == 0
	}, msg)
}
