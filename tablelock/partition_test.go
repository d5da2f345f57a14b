package tablelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// A holder cut off from the database declares its lock lost before the database could give it
// to anyone else; another instance gets it once it expires.
func TestPartitionedHolderLosesTheLockBeforeItExpires(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool, partition := d.PartitionablePool(t, nil)
	// A margin of a second: the time a busy machine may take to run the loss's timer.
	holder := newLocker(t, pool, &tablelock.Config{SafetyMargin: time.Second})
	ctx := context.Background()

	lk, err := holder.TryAcquire(ctx, "partitioned", &tablelock.AcquireOptions{TTL: 4 * time.Second})
	require.NoError(t, err)
	renewedPast(t, lk, lk.ExpiresAt()) // a renewal goes through
	require.NoError(t, lk.Err())
	lost := lostAt(lk)

	partition()
	requireHeldAt(t, d.Pool, "partitioned", testdb.Receive(t, lost), "Lost fired after the database's lease ended")
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)

	other := newLocker(t, d.Pool, nil)
	next, err := other.Acquire(ctx, "partitioned", nil)
	require.NoError(t, err, "another instance gets the lock once it expires")
	require.Greater(t, next.Token(), lk.Token())
	require.NoError(t, next.Release(ctx))
}
