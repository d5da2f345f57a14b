package tablelock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/locktest"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// The suite memlock passes too: code written against pglock.Locker behaves alike on both.
func TestConformance(t *testing.T) {
	t.Parallel()
	var dbs sync.Map // each subtest's database
	db := func(t *testing.T) *testdb.DB {
		d, ok := dbs.Load(t)
		require.True(t, ok, "New first")
		return d.(*testdb.DB)
	}
	// A force release is noticed within a heartbeat (333 ms); a lease has seconds of room, so
	// that a busy machine slows turns and places down without losing them.
	opts := &tablelock.AcquireOptions{TTL: 5 * time.Second}
	cfg := &tablelock.Config{HeartbeatInterval: 333 * time.Millisecond}
	locktest.Run(t, locktest.Subject{
		// Durable fencing is not declared here: a cluster of its own per run (initdb) would take
		// the CPU from this package's sub-second lease tests. Tokens across a crash and restart
		// of the server, and across a promotion, are checked by TestFailover, make chaos (its
		// immediate restarts) and make ha.
		Capabilities: locktest.Capabilities{Fencing: true, Fairness: true, LossSignal: true},
		New: func(t *testing.T) (pglock.Locker, pglock.Locker) {
			d := testdb.New(t, nil)
			dbs.Store(t, d)
			a := newLocker(t, d.NewPool(t, nil), cfg)
			b := newLocker(t, d.NewPool(t, nil), cfg)
			return a.AsLocker(opts), b.AsLocker(opts)
		},
		ForceRelease: func(t *testing.T, name string) {
			_, err := tablelock.ForceRelease(context.Background(), db(t).Pool, name, nil)
			require.NoError(t, err)
		},
		Waiting: func(t *testing.T, name string) int {
			var n int
			require.NoError(t, db(t).Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = $1 AND expires_at > clock_timestamp()`, name).Scan(&n))
			return n
		},
	})
}
