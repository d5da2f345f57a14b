package tablelock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// 16 goroutines on 2 pools, N = 3: every one is served, and never more than 3 are inside at
// once, as the database sees it through fenced writes.
func TestSemaphoreAdmitsAtMostNAndServesEveryone(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE inside (token bigint PRIMARY KEY); CREATE TABLE most (n int NOT NULL)`)
	require.NoError(t, err)
	var pools []*tablelockPool
	for range 2 {
		p := d.NewPool(t, nil)
		pools = append(pools, &tablelockPool{pool: p, locker: newLocker(t, p, nil)})
	}
	var wg sync.WaitGroup
	for i := range 16 {
		p := pools[i%2]
		wg.Go(func() {
			lk, err := p.locker.AcquireSemaphore(ctx, "partner-api", 3, &tablelock.AcquireOptions{TTL: 5 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			fenced := func(sql string) {
				err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
					if err := lk.Fence(ctx, tx); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, sql, lk.Token())
					return err
				})
				if err != nil {
					t.Error(err)
				}
			}
			fenced(`WITH entered AS (INSERT INTO inside VALUES ($1) RETURNING 1)
				INSERT INTO most SELECT count(*) + 1 FROM inside`) // those already in, and this one
			time.Sleep(20 * time.Millisecond) // overlap the others
			fenced(`DELETE FROM inside WHERE token = $1`)
			if err := lk.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var served, most int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*), max(n) FROM most`).Scan(&served, &most))
	require.Equal(t, 16, served, "everyone is served")
	require.Equal(t, 3, most, "3 at once, never more")
}

// The queue's order in the database need not be the order in which one Locker's waiters began
// (a place lost and written again goes to the back): a place freed is taken by the first place
// in the database's queue, even when that is not the Locker's first waiter, which is the only
// one woken by a release.
func TestSemaphoreServesTheQueuesFirstPlaceWhateverTheLocalOrder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	opts := func(who string) *tablelock.AcquireOptions {
		return &tablelock.AcquireOptions{TTL: 3 * time.Second, Metadata: map[string]any{"who": who}}
	}
	held, err := l.TryAcquireSemaphore(ctx, "s", 1, nil)
	require.NoError(t, err)
	queue := func() string {
		var order string
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(metadata->>'who', ',' ORDER BY waiter_seq), '')
			FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/s'`).Scan(&order))
		return order
	}
	served := map[string]chan *tablelock.Lock{"a": make(chan *tablelock.Lock, 1), "b": make(chan *tablelock.Lock, 1)}
	for _, who := range []string{"a", "b"} {
		go func() {
			lk, err := l.AcquireSemaphore(ctx, "s", 1, opts(who))
			if err != nil {
				t.Error(err)
				return
			}
			served[who] <- lk
		}()
		testdb.WaitFor(t, func() bool { return strings.HasSuffix(queue(), who) }, who+" queued")
	}
	// a's place is lost; a polls and writes it again, behind b, while it stays the Locker's first.
	_, err = d.Pool.Exec(ctx, `DELETE FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/s' AND metadata->>'who' = 'a'`)
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool { return queue() == "b,a" }, "a queued again, behind b")
	require.NoError(t, testdb.Moved(ctx, d.Pool, `SELECT expires_at FROM distributed_lock_waiters WHERE metadata->>'who' = 'b'`), "b sleeps, its place kept")

	require.NoError(t, held.Release(ctx))
	b := testdb.Receive(t, served["b"])
	require.NoError(t, b.Release(ctx))
	a := testdb.Receive(t, served["a"])
	require.NoError(t, a.Release(ctx))
}

type tablelockPool struct {
	pool   *pgxpool.Pool
	locker *tablelock.Locker
}

func TestSemaphoreServesWaitersInArrivalOrder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	var held []*tablelock.Lock
	for range 2 {
		lk, err := l.TryAcquireSemaphore(ctx, "s", 2, nil)
		require.NoError(t, err)
		held = append(held, lk)
	}
	_, err := l.TryAcquireSemaphore(ctx, "s", 2, nil)
	require.ErrorIs(t, err, pglock.ErrLocked)
	// Each waiter keeps its place once served, so that one place frees at a time.
	served := make(chan *tablelock.Lock, 3)
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			lk, err := l.AcquireSemaphore(ctx, "s", 2, nil)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			served <- lk
		}()
		testdb.WaitFor(t, func() bool {
			var n int
			d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/s'`).Scan(&n)
			return n == i+1
		})
	}
	_, err = l.TryAcquireSemaphore(ctx, "s", 3, nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "a try does not jump the queue, even with room")
	for _, free := range held {
		require.NoError(t, free.Release(ctx))
		held = append(held, testdb.Receive(t, served))
	}
	require.NoError(t, held[2].Release(ctx)) // the first waiter's place
	held = append(held, testdb.Receive(t, served))
	require.Equal(t, []int{0, 1, 2}, []int{<-order, <-order, <-order})
	for _, lk := range held[3:] { // the other two waiters' places
		require.NoError(t, lk.Release(ctx))
	}
}

func TestChangingPermitsAppliesToNewAcquisitions(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	a, err := l.TryAcquireSemaphore(ctx, "s", 2, nil)
	require.NoError(t, err)
	b, err := l.TryAcquireSemaphore(ctx, "s", 2, nil)
	require.NoError(t, err)
	c, err := l.TryAcquireSemaphore(ctx, "s", 3, nil)
	require.NoError(t, err, "raised to 3: a third place")
	require.Greater(t, c.Token(), b.Token())
	require.True(t, strings.HasPrefix(c.Name(), "pglock.semaphore/s/"))
	_, err = l.TryAcquireSemaphore(ctx, "s", 1, nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "lowered to 1: none until the holders leave")
	for _, lk := range []*tablelock.Lock{a, b, c} {
		require.NoError(t, lk.Err(), "holders keep their places")
		require.NoError(t, lk.Release(ctx))
	}
	lk, err := l.TryAcquireSemaphore(ctx, "s", 1, nil)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
}

func TestSemaphoreBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		sem    string
		places tablelock.Places
		want   error
	}{
		{"no permits", "s", tablelock.Places{}, pglock.ErrInvalidArgument},
		{"negative permits", "s", tablelock.Places{Permits: -1}, pglock.ErrInvalidArgument},
		{"more places than the semaphore has", "s", tablelock.Places{Permits: 3, Take: 4}, pglock.ErrInvalidArgument},
		{"negative places", "s", tablelock.Places{Permits: 3, Take: -1}, pglock.ErrInvalidArgument},
		{"more places than a key may hold", "s", tablelock.Places{Permits: 8, Take: 3, PerKey: 2}, pglock.ErrInvalidArgument},
		{"negative cap", "s", tablelock.Places{Permits: 8, PerKey: -1}, pglock.ErrInvalidArgument},
		{"key with a NUL", "s", tablelock.Places{Permits: 8, Key: "a\x00b"}, pglock.ErrInvalidName},
		{"key not UTF-8", "s", tablelock.Places{Permits: 8, Key: "\xff"}, pglock.ErrInvalidName},
		{"key too long", "s", tablelock.Places{Permits: 8, Key: strings.Repeat("k", 256)}, pglock.ErrInvalidName},
		{"empty name", "", tablelock.Places{Permits: 1}, pglock.ErrInvalidName},
		{"name too long for its places", strings.Repeat("s", 210), tablelock.Places{Permits: 1}, pglock.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.TryAcquirePlaces(ctx, tc.sem, tc.places, nil)
			require.ErrorIs(t, err, tc.want)
			_, err = l.AcquirePlaces(ctx, tc.sem, tc.places, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM distributed_locks) + (SELECT count(*) FROM distributed_lock_waiters)`).Scan(&rows))
	require.Zero(t, rows)
}

// A holder whose lease ran out inside a fenced transaction that is still working keeps its
// place until that transaction ends: no newcomer is admitted while it could still write. (An
// idle one is ended by the server at the lease's end plus the margin: Fence bounds it.)
func TestSemaphoreAdmitsNobodyWhileAnExpiredHolderIsFenced(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	// No heartbeat: the lease runs out while the fenced transaction works, a second in (a
	// lease of seconds would do too; this one keeps the test short without racing anything).
	noHeartbeat := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: -1})
	old, err := noHeartbeat.TryAcquireSemaphore(ctx, "s", 1, &tablelock.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) }) // before the Locker closes
	require.NoError(t, old.Fence(ctx, tx))
	// Statements shorter than the fence's bounds keep the transaction alive, until what is
	// awaited (read on another connection) holds.
	workUntil := func(what string, cond func() bool) {
		for deadline := time.Now().Add(30 * time.Second); !cond(); {
			_, err := tx.Exec(ctx, `SELECT pg_sleep(0.05)`)
			require.NoError(t, err)
			require.True(t, time.Now().Before(deadline), "not within 30 s: %s", what)
		}
	}
	workUntil("the lease has expired", func() bool {
		var expired bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT bool_and(expires_at < clock_timestamp()) FROM distributed_locks
			WHERE lock_name LIKE 'pglock.semaphore/s/%'`).Scan(&expired))
		return expired
	})
	admitted := make(chan error, 1)
	go func() {
		lk, err := l.TryAcquireSemaphore(ctx, "s", 1, nil)
		if err == nil {
			lk.Release(ctx)
		}
		admitted <- err
	}()
	workUntil("the newcomer waits for the fenced holder's place", func() bool {
		var waiting bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%name: TakeSemaphore %')`).Scan(&waiting))
		return waiting
	})
	select {
	case err := <-admitted:
		t.Fatalf("a newcomer got past a fenced holder: %v", err)
	default:
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, testdb.Receive(t, admitted), "admitted once the fenced transaction ended")
}

func TestSemaphoreNamesAreTheirOwn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	_, err := l.TryAcquireSemaphore(ctx, "api/eu", 1, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidName, "a '/' would make one semaphore's places another's")
	_, err = l.TryAcquire(ctx, "pglock.semaphore/api/someone", nil)
	require.ErrorIs(t, err, pglock.ErrInvalidName, "a lock may not pose as a semaphore's place")
	_, err = l.Acquire(ctx, "pglock.semaphore/api", nil)
	require.ErrorIs(t, err, pglock.ErrInvalidName, "nor join a semaphore's queue")
}

// Under REPEATABLE READ the count could miss holders admitted while the attempt waited for the
// name: the attempt refuses to run rather than admit too many.
func TestSemaphoreRefusesToCountOnAStaleSnapshot(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	})
	l := newLocker(t, pool, nil)
	_, err := l.TryAcquireSemaphore(context.Background(), "s", 1, nil)
	require.ErrorContains(t, err, "READ COMMITTED")
}
