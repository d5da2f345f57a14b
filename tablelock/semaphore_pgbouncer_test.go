package tablelock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// Through PgBouncer in transaction pooling (exec mode, waiters polling: docs/pgbouncer.md), a
// semaphore of 2 shared by two instances admits at most 2 holders at once, and every waiter
// gets a place in turn.
func TestSemaphoreThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	url := d.ThroughPgBouncer(t, "default_query_exec_mode=exec")
	lockers := make([]*tablelock.Locker, 2)
	for i := range lockers {
		lockers[i] = newLocker(t, testdb.OpenPool(t, url, nil), &tablelock.Config{DisableNotifications: true, MaxPollInterval: 50 * time.Millisecond})
	}
	const permits = 2
	var inside, most, sections atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			for range 5 {
				lk, err := lockers[i%2].AcquireSemaphore(ctx, "partner-api", permits, nil)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				inside.Add(-1)
				sections.Add(1)
				assert.NoError(t, lk.Release(ctx))
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 30, sections.Load(), "every waiter got a place")
	require.LessOrEqual(t, most.Load(), int32(permits), "never more holders than permits")
}
