package tablelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/locktest"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
	"github.com/pglock/pglock/tablelock"
)

// The suite memlock passes too: code written against pglock.Locker behaves alike on both.
// Not parallel with the package's other tests: its durable-fencing case starts and crashes a
// cluster of its own, whose initdb would take the CPU from the tests that time leases of a
// fraction of a second; it runs first, on its own.
func TestConformance(t *testing.T) {
	var dbs sync.Map // each subtest's database
	db := func(t *testing.T) *testdb.DB {
		d, ok := dbs.Load(t)
		require.True(t, ok, "New first")
		return d.(*testdb.DB)
	}
	opts := &tablelock.AcquireOptions{TTL: time.Second} // a force release is noticed within 333 ms
	locktest.Run(t, locktest.Subject{
		Capabilities: locktest.Capabilities{Fencing: true, DurableFencing: true, Fairness: true, LossSignal: true},
		New: func(t *testing.T) (pglock.Locker, pglock.Locker) {
			d := testdb.New(t, nil)
			dbs.Store(t, d)
			a := newLocker(t, d.NewPool(t, nil), nil)
			b := newLocker(t, d.NewPool(t, nil), nil)
			return a.AsLocker(opts), b.AsLocker(opts)
		},
		ForceRelease: func(t *testing.T, name string) {
			_, err := db(t).Pool.Exec(context.Background(), `SELECT force_release_lock($1)`, name)
			require.NoError(t, err)
		},
		Waiting: func(t *testing.T, name string) int {
			var n int
			require.NoError(t, db(t).Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = $1 AND expires_at > clock_timestamp()`, name).Scan(&n))
			return n
		},
		NewRestartable: func(t *testing.T) (pglock.Locker, func()) {
			ctx := context.Background()
			cluster, err := testdb.StartCluster(ctx)
			require.NoError(t, err, "durable fencing is tested on a cluster of the test's own (initdb, postgres)")
			t.Cleanup(func() { cluster.Remove() })
			pool, err := pgxpool.New(ctx, cluster.URL())
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			require.NoError(t, migrations.Up(ctx, pool))
			return newLocker(t, pool, nil).AsLocker(opts), func() {
				require.NoError(t, cluster.Crash())
				require.NoError(t, cluster.Start(ctx))
			}
		},
	})
}
