package tablelock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
	"github.com/pglock/pglock/tablelock"
)

// failoverLoad is what the holders were told: every grant and every fenced write acknowledged
// to them, which the promoted standby is then asked about.
type failoverLoad struct {
	mu     sync.Mutex
	grants map[int64]int    // token → acquisitions acknowledged with it
	writes map[string]int64 // acknowledged fenced write → its token
	since  int              // acknowledged writes since mark
}

// run runs holders of names through pool until ctx ends: each takes its name, writes a row
// fenced with the token, and lets go.
func (l *failoverLoad) run(ctx context.Context, locker *tablelock.Locker, pool *pgxpool.Pool, holder, name string) {
	for n := 0; ctx.Err() == nil; n++ {
		acquireCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		lk, err := locker.Acquire(acquireCtx, name, &tablelock.AcquireOptions{TTL: 2 * time.Second})
		cancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		l.mu.Lock()
		l.grants[lk.Token()]++
		l.mu.Unlock()
		write := fmt.Sprintf("%s/%d", holder, n)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lk.Fence(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO failover_writes (write, name, token) VALUES ($1, $2, $3)`, write, name, lk.Token())
			return err
		})
		if err == nil {
			l.mu.Lock()
			l.writes[write] = lk.Token()
			l.since++
			l.mu.Unlock()
		}
		releaseCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		lk.Release(releaseCtx)
		cancel()
	}
}

// TestFailover: table-lock holders and fenced writers run against a primary with a streaming
// standby; the replication link is cut, the primary crashes, the standby is promoted, and the
// clients' address is moved to it (as a virtual IP is). With synchronous replication nothing
// acknowledged is lost and no token is handed out twice. With asynchronous replication what the
// standby had not received is lost, grants and writes alike, and the promoted standby hands out
// tokens the old primary had already handed out, unless its token sequences are advanced
// before clients reach it; fencing keeps every name's writes in token order in every case.
func TestFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		synchronous   bool
		advanceTokens bool
	}{
		{"synchronous replication loses nothing", true, false},
		{"asynchronous replication loses what the standby had not received", false, false},
		{"asynchronous replication with tokens advanced on promotion hands none out twice", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			began := time.Now()
			step := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
			primary, err := testdb.StartCluster(ctx)
			step("primary started")
			require.NoError(t, err, "the failover test needs PostgreSQL's binaries (initdb, pg_basebackup)")
			t.Cleanup(func() { primary.Remove() })
			setUp, err := pgx.Connect(ctx, primary.URL())
			require.NoError(t, err)
			_, err = setUp.Exec(ctx, "CREATE DATABASE pglock")
			require.NoError(t, err)
			setUp.Close(ctx)
			dbURL := func(port int) string {
				return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pglock?sslmode=disable&connect_timeout=2", port)
			}
			admin, err := pgxpool.New(ctx, dbURL(primary.Port()))
			require.NoError(t, err)
			require.NoError(t, migrations.Up(ctx, admin))
			_, err = admin.Exec(ctx, `CREATE TABLE failover_writes (seq bigserial PRIMARY KEY, write text NOT NULL, name text NOT NULL, token bigint NOT NULL)`)
			require.NoError(t, err)

			link, err := testdb.NewProxy(fmt.Sprintf("127.0.0.1:%d", primary.Port())) // the replication link
			require.NoError(t, err)
			t.Cleanup(link.Close)
			standby, err := primary.Standby(ctx, link.Port, "cluster_name=standby")
			require.NoError(t, err)
			step("standby started")
			t.Cleanup(func() { standby.Remove() })
			if tc.synchronous {
				_, err = admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = 'standby'`)
				require.NoError(t, err)
				_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
				require.NoError(t, err)
				require.Eventually(t, func() bool {
					var sync bool
					admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync')`).Scan(&sync)
					return sync
				}, 10*time.Second, 50*time.Millisecond, "the standby becomes synchronous")
			}
			admin.Close()

			vip, err := testdb.NewProxy(fmt.Sprintf("127.0.0.1:%d", primary.Port())) // where clients connect
			require.NoError(t, err)
			t.Cleanup(vip.Close)
			load := &failoverLoad{grants: map[int64]int{}, writes: map[string]int64{}}
			loadCtx, stop := context.WithCancel(ctx)
			var holders sync.WaitGroup
			for i := range 4 {
				pool, err := pgxpool.New(ctx, dbURL(vip.Port))
				require.NoError(t, err)
				locker, err := tablelock.New(pool, &tablelock.Config{AppName: "failover"})
				require.NoError(t, err)
				holders.Go(func() { load.run(loadCtx, locker, pool, fmt.Sprint("holder-", i), fmt.Sprint("name-", i%2)) })
				t.Cleanup(func() {
					locker.Close(context.Background())
					pool.Close()
				})
			}
			defer func() { stop(); holders.Wait() }()

			time.Sleep(1500 * time.Millisecond)
			_, err = link.Partition() // the standby stops receiving
			require.NoError(t, err)
			load.mu.Lock()
			load.since = 0
			load.mu.Unlock()
			// Asynchronous: let the primary acknowledge what the standby will never see. Synchronous:
			// its commits wait for the standby, and nothing is acknowledged meanwhile.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				load.mu.Lock()
				since := load.since
				load.mu.Unlock()
				if since >= 50 || (tc.synchronous && time.Now().After(deadline.Add(-2*time.Second))) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			step("crash")
			require.NoError(t, primary.Crash())
			// The primary's host is gone with it: the link closes, and the standby's WAL
			// receiver sees it at once rather than after wal_receiver_timeout.
			link.Close()
			load.mu.Lock()
			grantsBefore, writesBefore := len(load.grants), len(load.writes)
			load.mu.Unlock()

			require.NoError(t, standby.Promote(ctx))
			step("promoted")
			promoted, err := pgxpool.New(ctx, dbURL(standby.Port()))
			require.NoError(t, err)
			defer promoted.Close()
			if tc.advanceTokens {
				// The guard: before any client reaches the new primary, move every token
				// sequence past anything the old primary can have handed out.
				_, err = promoted.Exec(ctx, `SELECT setval(format('%I.%I', schemaname, sequencename)::regclass, coalesce(last_value, 1) + 1000000)
					FROM pg_sequences WHERE sequencename LIKE '%fencing_token_seq'`)
				require.NoError(t, err)
			}
			require.NoError(t, vip.Repoint(fmt.Sprintf("127.0.0.1:%d", standby.Port())))
			time.Sleep(2500 * time.Millisecond)
			stop()
			holders.Wait()
			step("holders stopped")

			// What the promoted standby has against what the clients were told.
			rows, err := promoted.Query(ctx, `SELECT write FROM failover_writes`)
			require.NoError(t, err)
			kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			present := map[string]bool{}
			for _, w := range kept {
				present[w] = true
			}
			load.mu.Lock()
			lost, twice := 0, 0
			for w := range load.writes {
				if !present[w] {
					lost++
				}
			}
			for _, n := range load.grants {
				if n > 1 {
					twice++
				}
			}
			grantsAfter, writesAfter := len(load.grants)-grantsBefore, len(load.writes)-writesBefore
			load.mu.Unlock()
			var disorder int
			require.NoError(t, promoted.QueryRow(ctx, `SELECT count(*) FROM (
				SELECT token, max(token) OVER (PARTITION BY name ORDER BY seq ROWS UNBOUNDED PRECEDING) AS newest FROM failover_writes) w
				WHERE token < newest`).Scan(&disorder))
			t.Logf("before the failover: %d grants, %d fenced writes acknowledged; after it: %d grants, %d writes; "+
				"acknowledged writes lost: %d; tokens acknowledged to two holders: %d; writes out of token order: %d",
				grantsBefore, writesBefore, grantsAfter, writesAfter, lost, twice, disorder)

			require.Positive(t, writesBefore, "the holders worked before the failover")
			require.Positive(t, writesAfter, "and after it, on the promoted standby")
			require.Zero(t, disorder, "fencing keeps each name's writes in token order")
			switch {
			case tc.synchronous:
				require.Zero(t, lost, "synchronous replication loses no acknowledged write")
				require.Zero(t, twice, "nor hands a token out twice")
			case tc.advanceTokens:
				require.Positive(t, lost, "what the standby had not received is lost")
				require.Zero(t, twice, "but advanced sequences hand no token out twice")
			default:
				require.Positive(t, lost, "what the standby had not received is lost")
				require.Positive(t, twice, "and its tokens are handed out again")
			}
		})
	}
}
