package advisory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

// Transaction locks need nothing of a session, so they work through PgBouncer in transaction
// pooling mode, with pgx's exec or simple protocol mode: sections on one key never overlap,
// across pools (instances), and a try on a held key is refused.
func TestXactLocksThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	for _, params := range []string{"default_query_exec_mode=exec", "default_query_exec_mode=simple_protocol"} {
		t.Run(params, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			url := d.ThroughPgBouncer(t, params)
			ctx := context.Background()
			_, err := d.Pool.Exec(ctx, "CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0)")
			require.NoError(t, err)
			pools := make([]*pgxpool.Pool, 2)
			for i := range pools {
				pools[i], err = pgxpool.New(ctx, url)
				require.NoError(t, err)
				t.Cleanup(pools[i].Close)
			}
			key := advisory.StringKey("bounced")

			var inside atomic.Int32
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Go(func() {
					for range 15 {
						err := advisory.WithXactLock(ctx, pools[i%2], key, nil, func(ctx context.Context, tx pgx.Tx) error {
							if inside.Add(1) != 1 {
								t.Error("two transactions hold the key at once")
							}
							defer inside.Add(-1)
							var n int
							if err := tx.QueryRow(ctx, "SELECT n FROM counter").Scan(&n); err != nil {
								return err
							}
							_, err := tx.Exec(ctx, "UPDATE counter SET n = $1", n+1) // lost without the lock
							return err
						})
						if err != nil {
							t.Error(err)
						}
					}
				})
			}
			wg.Wait()
			var n int
			require.NoError(t, d.Pool.QueryRow(ctx, "SELECT n FROM counter").Scan(&n))
			require.Equal(t, 8*15, n, "every read-modify-write under the lock counted")

			err = advisory.WithXactLock(ctx, pools[0], key, nil, func(ctx context.Context, _ pgx.Tx) error {
				return pgx.BeginFunc(ctx, pools[1], func(tx pgx.Tx) error {
					require.ErrorIs(t, advisory.TryXactLock(ctx, tx, key), pglock.ErrLocked)
					return nil
				})
			})
			require.NoError(t, err)
		})
	}
}
