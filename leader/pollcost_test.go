package leader_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

// 100 candidates of one election that poll (notifications off, as behind PgBouncer) cost at
// most one query each per tablelock.DefaultMaxPollInterval once backed off: the first in line
// polls that often, the others every third of their TTL.
func TestPollingCandidatesCostAtMostOneQueryEachPerMaxPollInterval(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	const candidates = 100
	var queries testdb.QueryCounter
	pools := make([]*pgxpool.Pool, 4)
	for i := range pools {
		pools[i] = d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &queries })
	}
	for i := range candidates {
		e := newElector(t, pools[i%len(pools)], "crowded", &leader.Config{DisableNotifications: true})
		campaign(t, e, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) { <-ctx.Done() }})
	}
	waitForCandidates(t, d.Pool, "crowded", candidates-1)
	time.Sleep(2 * tablelock.DefaultMaxPollInterval) // every backoff at its cap

	before, from := queries.Count(), time.Now()
	time.Sleep(5 * time.Second)
	sent, window := queries.Count()-before, time.Since(from) // as long as the sleep really lasted
	perSecond := float64(sent) / window.Seconds()
	t.Logf("%d polling candidates of one election: %d queries in %s, %.1f per second", candidates, sent, window.Round(time.Millisecond), perSecond)
	bound := int64(candidates*window/tablelock.DefaultMaxPollInterval) + 1 // the window's fraction of a poll, rounded up
	require.LessOrEqual(t, sent, bound, fmt.Sprintf("at most one query per candidate per %s", tablelock.DefaultMaxPollInterval))
}
