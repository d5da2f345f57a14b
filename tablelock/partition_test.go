package tablelock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// partitionablePool is a pool on d whose every connection passes through an in-process
// toxiproxy; partition stops all traffic on it without closing anything, as a network
// partition does.
func partitionablePool(t *testing.T, d *testdb.DB) (pool *pgxpool.Pool, partition func()) {
	t.Helper()
	config, err := pgx.ParseConfig(d.URL())
	require.NoError(t, err)
	proxy := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		"postgres", "127.0.0.1:0", fmt.Sprintf("%s:%d", config.Host, config.Port))
	require.NoError(t, proxy.Start())
	_, port, _ := strings.Cut(proxy.Listen, ":")
	pool = d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Host = "127.0.0.1"
		fmt.Sscan(port, &c.ConnConfig.Port)
	})
	// Stop the proxy before the pool closes: closing a connection stuck behind the partition
	// would otherwise wait for pgx's cancel request to time out.
	t.Cleanup(proxy.Stop)
	return pool, func() {
		for _, stream := range []string{"upstream", "downstream"} {
			_, err := proxy.Toxics.AddToxicJson(strings.NewReader(
				`{"name": "partition_` + stream + `", "type": "timeout", "stream": "` + stream + `", "attributes": {"timeout": 0}}`))
			require.NoError(t, err)
		}
	}
}

// A holder cut off from the database declares its lock lost before the database could give it
// to anyone else; another instance gets it once it expires.
func TestPartitionedHolderLosesTheLockBeforeItExpires(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool, partition := partitionablePool(t, d)
	holder := newLocker(t, pool, nil)
	ctx := context.Background()

	lk, err := holder.TryAcquire(ctx, "partitioned", &tablelock.AcquireOptions{TTL: 2 * time.Second})
	require.NoError(t, err)
	time.Sleep(time.Second) // a renewal or two go through
	require.NoError(t, lk.Err())
	lost := lostAt(lk)

	partition()
	requireHeldAt(t, d.Pool, "partitioned", receive(t, lost), "Lost fired after the database's lease ended")
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)

	other := newLocker(t, d.Pool, nil)
	next, err := other.Acquire(ctx, "partitioned", nil)
	require.NoError(t, err, "another instance gets the lock once it expires")
	require.Greater(t, next.Token(), lk.Token())
	require.NoError(t, next.Release(ctx))
}
