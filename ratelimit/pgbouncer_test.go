package ratelimit_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/ratelimit"
)

// Through PgBouncer in transaction pooling (exec mode: docs/pgbouncer.md), three instances
// hammering one key are allowed exactly the burst, and Wait reserves slots that every waiter
// gets in turn.
func TestThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	url := d.ThroughPgBouncer(t, "default_query_exec_mode=exec")
	limiters := make([]*ratelimit.Limiter, 3)
	for i := range limiters {
		var err error
		limiters[i], err = ratelimit.New(testdb.OpenPool(t, url, nil), nil)
		require.NoError(t, err)
	}

	hourly := ratelimit.Limit{Rate: 10, Per: time.Hour, Burst: 10}
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			res, err := limiters[i%3].Allow(ctx, "partner-api", hourly)
			assert.NoError(t, err)
			if res.Allowed {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 10, allowed.Load(), "exactly the burst, across instances")

	fast := ratelimit.Limit{Rate: 20, Per: time.Second, Burst: 1}
	var waited atomic.Int32
	for i := range 6 {
		wg.Go(func() {
			if assert.NoError(t, limiters[i%3].Wait(ctx, "waited", fast)) {
				waited.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 6, waited.Load())
}
