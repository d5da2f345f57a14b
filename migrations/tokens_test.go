package migrations_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// tokensVersion is the migration from which tokens carry the timeline: the first after v0.1.0.
const tokensVersion = 2

// drawTokens takes one token of every kind: a lock's, a semaphore place's, a job attempt's and
// a cron run's, under names ending in suffix.
func drawTokens(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, suffix string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	tokens := map[string]int64{}
	for kind, sql := range map[string]string{
		"lock":      `SELECT fencing_token FROM acquire_lock_ms('lock-' || $1, 'h', 30000)`,
		"semaphore": `SELECT fencing_token FROM pglock_semaphore_attempt('sem-' || $1, 'h', 2, 30000, '{}', 'test', false)`,
		"job":       `SELECT (pglock_job_claim('scope', 'key-' || $1, 'h', 'test', false, 30000, NULL, 60000, 3, 0)).fencing_token`,
		"cron": `SELECT (pglock_cron_start(r.name, NULL, clock_timestamp(), 'scheduled', 'test', 30000, clock_timestamp())).fencing_token
			FROM (SELECT 'cron-' || $1 AS name, pglock_cron_register('cron-' || $1, '@hourly', 'UTC', 'skip', 'skip', 1000, 1000, 10, 'test')) AS r`,
	} {
		var token int64
		require.NoError(t, q.QueryRow(ctx, sql, suffix).Scan(&token), kind)
		tokens[kind] = token
	}
	return tokens
}

// Every kind of token carries an epoch from bit 40 that follows the server's timeline (1 on a
// server never promoted), and is larger than every token drawn before the migration that made it
// so; a sequence in an epoch ahead of the timeline that does not match it (as after pg_upgrade,
// which starts again at timeline 1) moves on to the next epoch that does, so that the next
// promotion moves it again.
func TestContractEveryTokenKindCarriesTheTimeline(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.NoError(t, migrations.Down(ctx, pool, int(migrations.Latest())-(tokensVersion-1)))
	before := drawTokens(t, pool, "before")
	require.NoError(t, migrations.Up(ctx, pool))
	after := drawTokens(t, pool, "after")
	for kind, token := range after {
		require.Greater(t, token, before[kind], kind)
		require.Equal(t, int64(1), token>>40, "%s: epoch 1, for timeline 1, in its high bits", kind)
	}

	_, err := pool.Exec(ctx, `SELECT setval('distributed_locks_fencing_token_seq', 5::bigint << 40 | 77)`)
	require.NoError(t, err)
	var token int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT fencing_token FROM acquire_lock_ms('ahead', 'h', 30000)`).Scan(&token))
	require.Equal(t, int64(1025<<40|1), token, "epoch 5 does not match timeline 1: the next one that does, 1025")
	require.NoError(t, pool.QueryRow(ctx, `SELECT fencing_token FROM acquire_lock_ms('ahead again', 'h', 30000)`).Scan(&token))
	require.Equal(t, int64(1025<<40|2), token, "and it goes on from there")
}

// A standby cut off from its primary misses tokens of every kind; once promoted, with nothing done
// between, every token it draws is larger than any its old primary handed out.
func TestContractTokensGrowAcrossAPromotionTheStandbyDidNotSee(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, err := testdb.StartCluster(ctx)
	require.NoError(t, err, "this test needs PostgreSQL's binaries (initdb, pg_basebackup)")
	t.Cleanup(func() { primary.Remove() })
	url := func(port int) string {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	}
	old, err := pgxpool.New(ctx, url(primary.Port()))
	require.NoError(t, err)
	defer old.Close()
	require.NoError(t, migrations.Up(ctx, old))
	link, err := testdb.NewProxy(primary.Addr())
	require.NoError(t, err)
	t.Cleanup(link.Close)
	standby, err := primary.Standby(ctx, link.Port)
	require.NoError(t, err)
	t.Cleanup(func() { standby.Remove() })

	drawTokens(t, old, "seen")
	var seen bool
	testdb.WaitFor(t, func() bool {
		return old.QueryRow(ctx, `SELECT replay_lsn >= pg_current_wal_lsn() FROM pg_stat_replication`).Scan(&seen) == nil && seen
	}, "the standby has replayed the first tokens")
	_, err = link.Partition()
	require.NoError(t, err)
	highest := map[string]int64{}
	for i := range 50 { // handed out by the old primary only
		for kind, token := range drawTokens(t, old, fmt.Sprint("unseen-", i)) {
			highest[kind] = max(highest[kind], token)
		}
	}
	old.Close()
	require.NoError(t, primary.Crash())
	require.NoError(t, standby.Promote(ctx), standby.Log())

	promoted, err := pgxpool.New(ctx, url(standby.Port()))
	require.NoError(t, err)
	defer promoted.Close()
	for kind, token := range drawTokens(t, promoted, "promoted") {
		require.Greater(t, token, highest[kind], "%s: larger than any the old primary handed out", kind)
		require.Equal(t, int64(2), token>>40, "%s: epoch 2, for the new timeline, in its high bits", kind)
	}
}
