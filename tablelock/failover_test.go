package tablelock_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
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
// to them, which the promoted standby is then asked about, and when each held its name.
type failoverLoad struct {
	mu     sync.Mutex
	grants map[int64]int    // token → acquisitions acknowledged with it
	writes map[string]int64 // acknowledged fenced write → its token
	held   map[string][]interval
	mark   time.Time // writes begun after it are counted in since
	since  int
}

// acquired is how many acquisitions were acknowledged. The caller holds mu.
func (l *failoverLoad) acquired() int {
	n := 0
	for _, count := range l.grants {
		n += count
	}
	return n
}

// interval is a holder's time acting with its name: from Acquire's return to the call of
// Release.
type interval struct{ from, to time.Time }

// overlaps counts, per name, holders whose intervals overlap.
func (l *failoverLoad) overlaps() int {
	n := 0
	for _, spans := range l.held {
		slices.SortFunc(spans, func(a, b interval) int { return a.from.Compare(b.from) })
		for i := 1; i < len(spans); i++ {
			if spans[i].from.Before(spans[i-1].to) {
				n++
			}
		}
	}
	return n
}

// count starts counting the acknowledged writes begun from now on.
func (l *failoverLoad) count() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mark, l.since = time.Now(), 0
}

// counted is how many acknowledged writes began since count was called.
func (l *failoverLoad) counted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
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
		from := time.Now()
		l.mu.Lock()
		l.grants[lk.Token()]++
		l.mu.Unlock()
		write := fmt.Sprintf("%s/%d", holder, n)
		began := time.Now()
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lk.Fence(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO failover_writes (write, name, token) VALUES ($1, $2, $3)`, write, name, lk.Token())
			return err
		})
		l.mu.Lock()
		if err == nil {
			l.writes[write] = lk.Token()
			if began.After(l.mark) {
				l.since++
			}
		}
		l.mu.Unlock()
		to := time.Now()
		releaseCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		lk.Release(releaseCtx) // one that fails is retried in the background, as its Locker does
		cancel()
		l.mu.Lock()
		l.held[name] = append(l.held[name], interval{from, to})
		l.mu.Unlock()
	}
}

// TestFailover: table-lock holders and fenced writers run against a primary with a streaming
// standby; the replication link is cut, the primary crashes, the standby is promoted, and the
// clients' address is moved to it (as a virtual IP is). With synchronous replication nothing
// acknowledged is lost. With asynchronous replication what the standby had not received is
// lost, grants and writes alike. Either way no token is handed out twice, with no step between
// the promotion and the clients (the promoted standby's timeline is in its tokens: pglock_next_token), and
// fencing keeps every name's writes in token order.
func TestFailover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		synchronous bool
	}{
		{"synchronous replication loses nothing", true},
		{"asynchronous replication loses what the standby had not received, and hands no token out twice", false},
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
			// A grant is lost on the promoted standby exactly when its row in failover_grants is
			// missing there.
			_, err = admin.Exec(ctx, `
				CREATE TABLE failover_writes (seq bigserial PRIMARY KEY, write text NOT NULL, name text NOT NULL, token bigint NOT NULL);
				CREATE SEQUENCE failover_order;`+testdb.GrantLogSQL("failover_grants", "failover_order"))
			require.NoError(t, err)

			link, err := testdb.NewProxy(primary.Addr()) // the replication link
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
				testdb.WaitFor(t, func() bool {
					var sync bool
					admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync')`).Scan(&sync)
					return sync
				}, "the standby becomes synchronous")
			}
			admin.Close()

			vip, err := testdb.NewProxy(primary.Addr()) // where clients connect
			require.NoError(t, err)
			t.Cleanup(vip.Close)
			load := &failoverLoad{grants: map[int64]int{}, writes: map[string]int64{}, held: map[string][]interval{}}
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

			load.count()
			testdb.WaitFor(t, func() bool { return load.counted() >= 100 },
				"the holders work against the primary")
			_, err = link.Partition() // the standby stops receiving
			require.NoError(t, err)
			load.count()
			// Asynchronous: let the primary acknowledge what the standby will never see (more than
			// the 32 values PostgreSQL logs a sequence ahead). Synchronous: its commits wait for
			// the standby, and none begun after the cut may be acknowledged.
			if tc.synchronous {
				time.Sleep(time.Second)
				require.Zero(t, load.counted(), "nothing is acknowledged while the synchronous standby is cut off")
			} else {
				testdb.WaitFor(t, func() bool { return load.counted() >= 100 },
					"the primary acknowledges writes the standby does not receive")
			}
			step("crash")
			// The primary's host goes, and its network with it: the link closes first, so that
			// the standby's WAL receiver, reconnecting, finds nothing to wait for.
			link.Close()
			require.NoError(t, primary.Crash())
			load.mu.Lock()
			grantsBefore, writesBefore := load.acquired(), len(load.writes)
			grantedBefore := maps.Clone(load.grants)
			load.mu.Unlock()

			require.NoError(t, standby.Promote(ctx), standby.Log())
			step("promoted")
			promoted, err := pgxpool.New(ctx, dbURL(standby.Port()))
			require.NoError(t, err)
			defer promoted.Close()
			// The grants the promoted standby knows of, before any client reaches it (after that,
			// a token handed out again would look known).
			rows, err := promoted.Query(ctx, `SELECT token FROM failover_grants`)
			require.NoError(t, err)
			granted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			require.NoError(t, vip.Repoint(standby.Addr()))
			load.count()
			testdb.WaitFor(t, func() bool { return load.counted() >= 200 },
				"the holders carry on against the promoted standby")
			stop()
			holders.Wait()
			step("holders stopped")

			// What the promoted standby has against what the clients were told.
			known := map[int64]bool{}
			for _, token := range granted {
				known[token] = true
			}
			rows, err = promoted.Query(ctx, `SELECT write FROM failover_writes`)
			require.NoError(t, err)
			kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			present := map[string]bool{}
			for _, w := range kept {
				present[w] = true
			}
			load.mu.Lock()
			lost, lostGrants, twice := 0, 0, 0
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
			for token := range grantedBefore {
				if !known[token] {
					lostGrants++
				}
			}
			overlaps := load.overlaps()
			grantsAfter, writesAfter := load.acquired()-grantsBefore, len(load.writes)-writesBefore
			load.mu.Unlock()
			var disorder int
			require.NoError(t, promoted.QueryRow(ctx, `SELECT count(*) FROM (
				SELECT token, max(token) OVER (PARTITION BY name ORDER BY seq ROWS UNBOUNDED PRECEDING) AS newest FROM failover_writes) w
				WHERE token < newest`).Scan(&disorder))
			t.Logf("before the failover: %d grants, %d fenced writes acknowledged; after it: %d grants, %d writes; "+
				"lost: %d grants, %d fenced writes; tokens acknowledged to two holders: %d; holders overlapping: %d; writes out of token order: %d",
				grantsBefore, writesBefore, grantsAfter, writesAfter, lostGrants, lost, twice, overlaps, disorder)

			require.Positive(t, writesBefore, "the holders worked before the failover")
			require.Positive(t, writesAfter, "and after it, on the promoted standby")
			require.Zero(t, disorder, "fencing keeps each name's writes in token order")
			require.Zero(t, twice, "no token is handed out twice, with no step between the promotion and the clients")
			if tc.synchronous {
				require.Zero(t, lostGrants, "synchronous replication loses no acknowledged grant")
				require.Zero(t, lost, "nor an acknowledged write")
				require.Zero(t, overlaps, "and no two holders of a name overlap")
			} else {
				require.Positive(t, lostGrants, "what the standby had not received is lost: grants")
				require.Positive(t, lost, "and writes")
			}
		})
	}
}
