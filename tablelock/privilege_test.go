package tablelock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// leastPrivilege is what docs/sql.md grants an application role for table locks.
var leastPrivilege = []string{
	"pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean)",
	"pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean)",
	"pglock_release(varchar, varchar)", "verify_fence(varchar, bigint)",
	"pglock_fence(varchar, bigint, bigint)", "extend_lock_ms(varchar, varchar, bigint)",
	"pglock_renew_many(varchar[], varchar[], bigint[])", "pglock_wait_many(varchar[], varchar[], bigint[])",
	"pglock_release_after(varchar, varchar, bigint)",
	"pglock_semaphore_take(varchar, varchar, integer, integer, varchar, integer, bigint, jsonb, varchar, boolean)",
	"pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb, varchar, boolean)",
}

// grantedRole makes a role that may read the lock tables and execute functions, and returns
// the pool option that connects as it, with tracer (when not nil) to watch its statements.
func grantedRole(t *testing.T, d *testdb.DB, functions []string, tracer pgx.QueryTracer) func(*pgxpool.Config) {
	t.Helper()
	role := d.NewRole(t, "pglock_app")
	_, err := d.Pool.Exec(context.Background(), fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s;
		GRANT SELECT ON distributed_locks, distributed_lock_waiters TO %[1]s;
		GRANT EXECUTE ON FUNCTION %[2]s TO %[1]s`, role, strings.Join(functions, ", ")))
	require.NoError(t, err)
	return func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET ROLE "+role)
			return err
		}
		if tracer != nil {
			c.ConnConfig.Tracer = tracer
		}
	}
}

// The grants docs/sql.md lists are all a Locker needs: it takes, waits for, hands off, fences
// and releases locks, a semaphore's places and both together, as a role that cannot write the tables.
func TestLockerWorksWithTheLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	var failed testdb.FailureCounter
	asRole := grantedRole(t, d, leastPrivilege, &failed)
	// Renewed every 100 ms, but lost only after seconds without one: a busy machine delays the
	// heartbeats this test counts, it does not take the lock away.
	cfg := &tablelock.Config{HeartbeatInterval: 100 * time.Millisecond}
	first := newLocker(t, d.NewPool(t, asRole), cfg)
	second := newLocker(t, d.NewPool(t, asRole), cfg)

	opts := &tablelock.AcquireOptions{TTL: 6 * time.Second}
	held, err := first.TryAcquire(ctx, "app", opts)
	require.NoError(t, err)
	renewed(t, d.Pool, "distributed_locks", "app", 3)
	require.NoError(t, held.Err())
	acquired := acquireQueued(t, second, d.Pool, "app", opts)
	renewed(t, d.Pool, "distributed_lock_waiters", "app", 3) // the waiter's place kept
	require.NoError(t, held.Release(ctx))
	next := <-acquired
	require.NoError(t, pgx.BeginFunc(ctx, d.NewPool(t, asRole), func(tx pgx.Tx) error { return next.Fence(ctx, tx) }))
	require.NoError(t, next.Release(ctx))
	minHeld, err := first.TryAcquire(ctx, "app", opts)
	require.NoError(t, err)
	require.NoError(t, minHeld.ReleaseAfter(ctx, time.Minute))

	// A semaphore's places, taken, waited for and released.
	places, err := first.TryAcquirePlaces(ctx, "api", tablelock.Places{Permits: 2, Take: 2, Key: "one"}, opts)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		place, err := second.AcquirePlaces(ctx, "api", tablelock.Places{Permits: 2, Key: "other", PerKey: 1}, opts)
		if err == nil {
			err = place.Release(ctx)
		}
		waited <- err
	}()
	testdb.WaitFor(t, func() bool {
		var n int
		d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/api'`).Scan(&n)
		return n == 1
	}, "the waiter is queued")
	require.NoError(t, places.Release(ctx))
	require.NoError(t, testdb.Receive(t, waited))

	// A combined acquisition, fenced and released.
	both, err := first.AcquireAll(ctx, []tablelock.Resource{{Lock: "app"}, {Semaphore: "api", Places: tablelock.Places{Permits: 2}}}, opts)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, d.NewPool(t, asRole), func(tx pgx.Tx) error { return both.Fence(ctx, tx) }))
	require.NoError(t, both.Release(ctx))
	refused, why := failed.Count()
	require.Zero(t, refused, "no statement was refused: %s", why)
}

// renewed waits until the expiry of name's row in table (distributed_locks, or
// distributed_lock_waiters for a waiter's place) has moved forward times times.
func renewed(t *testing.T, pool *pgxpool.Pool, table, name string, times int) {
	t.Helper()
	for range times {
		require.NoError(t, testdb.Moved(testdb.Context(t), pool, "SELECT expires_at FROM "+table+" WHERE lock_name = $1", name))
	}
}
