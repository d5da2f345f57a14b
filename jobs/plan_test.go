package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

// A DBA's ANALYZE of the empty table (vacuumdb --analyze right after install) records it as
// empty. A session that then claims keys caches plans for the claim's statements made for an
// empty table, and keeps them as the table grows, until it is analysed again. Those plans must
// still find a key by the primary key: with 100,000 records, a sequential scan costs a claim ten
// times its time; so does a range scan of a scope's keys (a batch's lookup of many keys was
// planned so). auto_explain shows the plans the session runs, cached ones included.
func TestClaimsKeepThePrimaryKeyAfterAnAnalyzeOfTheEmptyTable(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	newEffects(t, d.Pool)
	_, err := d.Pool.Exec(ctx, `ANALYZE pglock_jobs`)
	require.NoError(t, err)

	var mu sync.Mutex
	var plans []string
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1 // one session: the one whose plans are cached
		c.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			mu.Lock()
			defer mu.Unlock()
			plans = append(plans, n.Message)
		}
	})
	dd := newDeduper(t, pool, nil)
	deliver := func(prefix string, i int) {
		t.Helper()
		key := fmt.Sprintf("%s-%d", prefix, i)
		for range 2 { // the first runs the key, the second is its duplicate
			_, err := dd.Run(ctx, key, nil, func(context.Context) error { return nil })
			require.NoError(t, err)
			_, err = dd.RunTx(ctx, key+"-tx", nil, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
				return err
			})
			require.NoError(t, err)
			_, err = dd.RunTxBatch(ctx, []string{key + "-b1", key + "-b2", key + "-b3"}, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) SELECT unnest($1::text[])`, claimed)
				return err
			})
			require.NoError(t, err)
		}
	}
	for i := range 10 { // past the five custom plans after which PostgreSQL may keep a generic one
		deliver("before", i)
	}

	_, err = d.Pool.Exec(ctx, `INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token,
		started_at, finished_at, retain_until, created_at)
		SELECT '', 'loaded-' || i, 'succeeded', 'loader', '', 1, i, now(), now(), now() + interval '1 day', now()
		  FROM generate_series(1, 100000) AS i`)
	require.NoError(t, err)

	explain := func(on bool) {
		t.Helper()
		settings := `SET client_min_messages = log; SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_nested_statements = on`
		if !on {
			settings = `RESET client_min_messages; RESET auto_explain.log_min_duration`
		}
		_, err := pool.Exec(ctx, settings)
		require.NoError(t, err)
	}
	_, err = pool.Exec(ctx, `LOAD 'auto_explain'`)
	require.NoError(t, err)
	mu.Lock()
	plans = nil
	mu.Unlock()
	explain(true)
	deliver("after", 0)
	_, err = dd.Run(ctx, "loaded-7", nil, func(context.Context) error { return nil })
	require.NoError(t, err)
	explain(false)

	mu.Lock()
	var claims []string
	for _, p := range plans {
		if strings.Contains(p, "pglock_jobs") && !strings.Contains(p, "auto_explain") {
			claims = append(claims, p)
		}
	}
	mu.Unlock()
	require.NotEmpty(t, claims, "auto_explain showed the claims' plans")
	var scans []string
	for _, p := range claims {
		if strings.Contains(p, "Seq Scan on pglock_jobs") {
			scans = append(scans, p)
		}
	}
	require.Empty(t, scans, "plans of the claims that scan the whole table")
	// Nor a scope's whole range of the primary key: every lookup names its key.
	var ranges []string
	for _, p := range claims {
		lines := strings.Split(p, "\n")
		for i, line := range lines {
			if !strings.Contains(line, "Scan") || !strings.Contains(line, "pglock_jobs_pkey") { // an Index, Index Only or Bitmap Index Scan
				continue
			}
			keyed := false // by its own Index Cond, before the next node
			for _, next := range lines[i+1:] {
				if strings.Contains(next, "->") {
					break
				}
				keyed = keyed || strings.Contains(next, "Index Cond:") && strings.Contains(next, "job_key")
			}
			if !keyed {
				ranges = append(ranges, p)
			}
		}
	}
	require.Empty(t, ranges, "plans of the claims that scan a scope's whole range")
	require.Contains(t, strings.Join(claims, "\n"), "pglock_jobs_pkey", "the claims find keys by the primary key")

	// Time, reported: duplicates of loaded keys with the plans cached before the load, and with
	// plans made after the table is analysed again.
	duplicates := func() time.Duration {
		began := time.Now()
		for i := range 200 {
			_, err := dd.Run(ctx, fmt.Sprintf("loaded-%d", 1000+i), nil, func(context.Context) error { return nil })
			require.NoError(t, err)
		}
		return time.Since(began) / 200
	}
	cached := duplicates()
	_, err = d.Pool.Exec(ctx, `ANALYZE pglock_jobs`)
	require.NoError(t, err)
	analysed := duplicates()
	t.Logf("a duplicate's claim: %s with the plans cached before the load, %s once analysed (%.2f×)",
		cached, analysed, float64(cached)/float64(analysed))
}
