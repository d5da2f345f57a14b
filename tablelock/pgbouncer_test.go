package tablelock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// Through PgBouncer in transaction pooling mode, which cannot keep prepared statements or a
// LISTEN: with pgx's exec or simple protocol mode, locks are taken, refused, fenced, renewed,
// handed over in order and released, by polling or by a listener connected directly.
func TestThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		params         string
		listenDirectly bool
	}{
		{"exec mode, polling", "default_query_exec_mode=exec", false},
		{"simple protocol, polling", "default_query_exec_mode=simple_protocol", false},
		{"exec mode, listener connected directly", "default_query_exec_mode=exec", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			url := d.ThroughPgBouncer(t, tc.params)
			ctx := context.Background()
			cfg := &tablelock.Config{DisableNotifications: !tc.listenDirectly, MaxPollInterval: 50 * time.Millisecond}
			if tc.listenDirectly {
				direct, err := pgx.ParseConfig(d.URL())
				require.NoError(t, err)
				direct.RuntimeParams["application_name"] = "direct-listener"
				cfg.ListenerConnConfig = direct
				cfg.MaxPollInterval = time.Hour // the first waiter's polls back off to a third of its TTL
			}
			pools := make([]*pgxpool.Pool, 2)
			lockers := make([]*tablelock.Locker, 2)
			for i := range pools {
				pool, err := pgxpool.New(ctx, url)
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				pools[i], lockers[i] = pool, newLocker(t, pool, cfg)
			}
			a, b := lockers[0], lockers[1]
			opts := &tablelock.AcquireOptions{TTL: 3 * time.Second, Metadata: map[string]any{"via": "pgbouncer"}}

			held, err := a.TryAcquire(ctx, "bounced", opts)
			require.NoError(t, err)
			_, err = b.TryAcquire(ctx, "bounced", nil)
			var locked *tablelock.LockedError
			require.ErrorAs(t, err, &locked)
			require.Equal(t, "pgbouncer", locked.Metadata["via"])

			acquired := acquireQueued(t, b, d.Pool, "bounced", opts)
			if tc.listenDirectly {
				testdb.WaitFor(t, func() bool { return listeners(t, d.Pool, "direct-listener") == 1 }, "the listener connects directly")
			}
			require.NoError(t, held.Extend(ctx, 5*time.Second))
			require.NoError(t, pgx.BeginFunc(ctx, pools[0], func(tx pgx.Tx) error { return held.Fence(ctx, tx) }))
			require.NoError(t, held.Release(ctx))
			lk := testdb.Receive(t, acquired)
			require.Greater(t, lk.Token(), held.Token())
			require.NoError(t, lk.Release(ctx))

			// Mutual exclusion under contention, both instances through the bouncer.
			var inside, sections atomic.Int32
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Go(func() {
					for range 10 {
						err := lockers[i%2].WithLock(ctx, "contended", opts, func(context.Context) error {
							if inside.Add(1) != 1 {
								t.Error("two holders at once")
							}
							time.Sleep(time.Millisecond)
							inside.Add(-1)
							sections.Add(1)
							return nil
						})
						assert.NoError(t, err)
					}
				})
			}
			wg.Wait()
			require.EqualValues(t, 60, sections.Load())
			require.ErrorIs(t, a.WithLock(ctx, "", nil, nil), pglock.ErrInvalidName)
		})
	}
}

// A client whose environment sets PGOPTIONS sends the startup parameter options, which
// PgBouncer refuses unless told to ignore it (docs/pgbouncer.md): the harness's does, as users'
// should.
func TestThroughPgBouncerWithOptionsInTheStartupPacket(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := testdb.OpenPool(t, d.ThroughPgBouncer(t, "default_query_exec_mode=exec"), func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["options"] = "-c statement_timeout=5000" // what PGOPTIONS sends
	})
	locker, err := tablelock.New(pool, &tablelock.Config{DisableNotifications: true})
	require.NoError(t, err)
	defer locker.Close(context.Background())
	lk, err := locker.TryAcquire(context.Background(), "with-options", nil)
	require.NoError(t, err)
	require.NoError(t, lk.Release(context.Background()))
}
