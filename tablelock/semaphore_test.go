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
	served := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			lk, err := l.AcquireSemaphore(ctx, "s", 2, nil)
			if err != nil {
				t.Error(err)
				return
			}
			served <- i
			lk.Release(ctx)
		})
		require.Eventually(t, func() bool {
			var n int
			d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/s'`).Scan(&n)
			return n == i+1
		}, 30*time.Second, 2*time.Millisecond)
	}
	_, err = l.TryAcquireSemaphore(ctx, "s", 3, nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "a try does not jump the queue, even with room")
	require.NoError(t, held[0].Release(ctx))
	require.Equal(t, 0, testdb.Receive(t, served))
	require.NoError(t, held[1].Release(ctx))
	wg.Wait()
	close(served)
	var rest []int
	for i := range served {
		rest = append(rest, i)
	}
	require.Equal(t, []int{1, 2}, rest)
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
		name    string
		sem     string
		permits int
		want    error
	}{
		{"no permits", "s", 0, pglock.ErrInvalidArgument},
		{"negative permits", "s", -1, pglock.ErrInvalidArgument},
		{"empty name", "", 1, pglock.ErrInvalidName},
		{"name too long for its places", strings.Repeat("s", 210), 1, pglock.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.TryAcquireSemaphore(ctx, tc.sem, tc.permits, nil)
			require.ErrorIs(t, err, tc.want)
			_, err = l.AcquireSemaphore(ctx, tc.sem, tc.permits, nil)
			require.ErrorIs(t, err, tc.want)
		})
	}
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM distributed_locks) + (SELECT count(*) FROM distributed_lock_waiters)`).Scan(&rows))
	require.Zero(t, rows)
}
