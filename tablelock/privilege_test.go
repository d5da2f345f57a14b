package tablelock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// The grants docs/sql.md lists are all a Locker needs: it takes, waits for, hands off, fences
// and releases locks as a role that cannot write the tables.
func TestLockerWorksWithTheLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	role := d.NewRole(t, "pglock_app")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s;
		GRANT SELECT ON distributed_locks, distributed_lock_waiters TO %[1]s;
		GRANT EXECUTE ON FUNCTION
			pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean),
			pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean),
			pglock_release(varchar, varchar), verify_fence(varchar, bigint),
			pglock_fence(varchar, bigint, bigint),
			extend_lock_ms(varchar, varchar, bigint),
			pglock_renew_many(varchar[], varchar[], bigint[]) TO %[1]s;`, role))
	require.NoError(t, err)
	asRole := func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET ROLE "+role)
			return err
		}
	}
	first := newLocker(t, d.NewPool(t, asRole), nil)
	second := newLocker(t, d.NewPool(t, asRole), nil)

	held, err := first.TryAcquire(ctx, "app", &tablelock.AcquireOptions{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	time.Sleep(time.Second) // renewed several times
	require.NoError(t, held.Err())
	acquired := acquireQueued(t, second, d.Pool, "app", nil)
	require.NoError(t, held.Release(ctx))
	next := <-acquired
	require.NoError(t, pgx.BeginFunc(ctx, d.NewPool(t, asRole), func(tx pgx.Tx) error { return next.Fence(ctx, tx) }))
	require.NoError(t, next.Release(ctx))
}
