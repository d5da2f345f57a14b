package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// debouncedRun is a run as fn recorded it, in its transaction.
type debouncedRun struct {
	token      int64
	payload    int
	deliveries int
}

// newRunsTable makes the table where each debounced run's effect is a row.
func newRunsTable(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE debounced_runs (key text, token bigint, payload int, deliveries int, attempt int)`)
	require.NoError(t, err)
}

// recordRun is a runner's fn: the run's effect is a row of debounced_runs.
func recordRun(ctx context.Context, tx pgx.Tx, run jobs.DebouncedRun) error {
	var payload int
	if err := json.Unmarshal(run.Payload, &payload); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO debounced_runs VALUES ($1, $2, $3, $4, $5)`, run.Key, run.Token, payload, run.Deliveries, run.Attempt)
	return err
}

// startRunners runs RunDebounced on each instance until the test ends.
func startRunners(t *testing.T, instances []*jobs.Deduper, opts *jobs.RunnerOptions,
	fn func(ctx context.Context, tx pgx.Tx, run jobs.DebouncedRun) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, dd := range instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := dd.RunDebounced(ctx, opts, fn); err != nil {
				t.Errorf("RunDebounced: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// runsOf waits until key has nothing pending nor running, and returns its runs in claim order.
func runsOf(t *testing.T, pool *pgxpool.Pool, key string) []debouncedRun {
	t.Helper()
	ctx := context.Background()
	testdb.WaitFor(t, func() bool {
		var left bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pglock_job_debounces WHERE job_key = $1)`, key).Scan(&left))
		return !left
	}, "the runs of %q end", key)
	rows, err := pool.Query(ctx, `SELECT token, payload, deliveries FROM debounced_runs WHERE key = $1 ORDER BY token`, key)
	require.NoError(t, err)
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (debouncedRun, error) {
		var run debouncedRun
		return run, r.Scan(&run.token, &run.payload, &run.deliveries)
	})
	require.NoError(t, err)
	return runs
}

// requireEveryDeliveryCountedOnce checks runs (in claim order) against deliveries numbered 1 to
// n in the database's order: each run answers the deliveries of its cycle, once, and carries
// the last of them.
func requireEveryDeliveryCountedOnce(t *testing.T, runs []debouncedRun, n int) {
	t.Helper()
	sum := 0
	for i, run := range runs {
		sum += run.deliveries
		require.Equal(t, sum, run.payload, "run %d of %d carries the last delivery of its cycle", i+1, len(runs))
	}
	require.Equal(t, n, sum, "every delivery is counted once")
}

// deliverInOrder delivers key n times from the instances in turn, one at a time (so that their
// numbers are their order in the database), spaced by every; it returns how many times two
// consecutive deliveries may have been at least minGap apart in the database: from the start of
// one call to the end of the next, by this host's clock, bounds that.
func deliverInOrder(t *testing.T, instances []*jobs.Deduper, key string, n int, every time.Duration,
	opts jobs.DebounceOptions, minGap time.Duration) (gaps int) {
	t.Helper()
	var previous time.Time // the start of the call before
	for i := 1; i <= n; i++ {
		start := time.Now()
		_, err := instances[i%len(instances)].Debounce(context.Background(), key, i, opts)
		require.NoError(t, err)
		if !previous.IsZero() && time.Since(previous) >= minGap {
			gaps++
		}
		previous = start
		if d := every - time.Since(start); d > 0 {
			time.Sleep(d)
		}
	}
	return gaps
}

func TestABurstOfDeliveriesRunsOnceWithTheLastPayload(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRunsTable(t, d.Pool)
	instances := fourInstances(t, d, nil)
	startRunners(t, instances, nil, recordRun)

	const quiet = 300 * time.Millisecond
	opts := jobs.DebounceOptions{Quiet: quiet, MaxWait: time.Minute}
	// 1,000 deliveries over 2 s.
	gaps := deliverInOrder(t, instances, "user-42", 1000, 2*time.Millisecond, opts, quiet)
	runs := runsOf(t, d.Pool, "user-42")
	t.Logf("1,000 deliveries over 2 s, quiet %s: %d run(s); %d gap(s) of the quiet period's length on this host", quiet, len(runs), gaps)
	requireEveryDeliveryCountedOnce(t, runs, 1000)
	// One run per quiet period the burst left; none on a machine that kept up.
	require.GreaterOrEqual(t, len(runs), 1)
	require.LessOrEqual(t, len(runs), 1+gaps)
}

func TestASteadyStreamRunsOncePerMaxWait(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRunsTable(t, d.Pool)
	instances := fourInstances(t, d, nil)
	startRunners(t, instances, nil, recordRun)

	const quiet, maxWait = 300 * time.Millisecond, time.Second
	opts := jobs.DebounceOptions{Quiet: quiet, MaxWait: maxWait}
	start := time.Now()
	gaps := deliverInOrder(t, instances, "feed", 50, 100*time.Millisecond, opts, quiet) // 5 s
	span := time.Since(start)
	runs := runsOf(t, d.Pool, "feed")
	t.Logf("a delivery every 100 ms for %s, quiet %s, max wait %s: %d runs; %d gap(s) of the quiet period's length on this host",
		span.Round(time.Millisecond), quiet, maxWait, len(runs), gaps)
	requireEveryDeliveryCountedOnce(t, runs, 50)
	// The max wait runs the stream once a second (a cycle lasts the max wait and the run), and
	// the quiet period once more at its end: 5 ± 1 for 5 s, and more only for gaps that let the
	// quiet period pass.
	expected := int(span / maxWait)
	require.GreaterOrEqual(t, len(runs), expected-1)
	require.LessOrEqual(t, len(runs), expected+1+gaps)
}

func TestDeliveriesRacingTheClaimsAreNeverLost(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRunsTable(t, d.Pool)
	instances := fourInstances(t, d, nil)
	startRunners(t, instances, &jobs.RunnerOptions{Workers: 2, PollInterval: 50 * time.Millisecond}, recordRun)

	// A quiet period of 1 ms: claims follow deliveries as closely as they can.
	opts := jobs.DebounceOptions{Quiet: time.Millisecond, MaxWait: 5 * time.Millisecond}
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	const total = 2000
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// One delivery at a time across the goroutines: their numbers are their order.
				mu.Lock()
				if next == total {
					mu.Unlock()
					return
				}
				next++
				_, err := instances[i%4].Debounce(context.Background(), "hot", next, opts)
				mu.Unlock()
				if err != nil {
					t.Errorf("Debounce: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	runs := runsOf(t, d.Pool, "hot")
	t.Logf("%d deliveries racing the claims of 4 runners: %d runs", total, len(runs))
	requireEveryDeliveryCountedOnce(t, runs, total)
	require.Greater(t, len(runs), 1, "the claims raced the deliveries")
}

// A run whose transaction's backend is killed, or whose runner is cut off from the database,
// leaves no effect; the run is run again, once, with its payload and its deliveries.
func TestAKilledRunIsRunAgainAndItsDeliveriesCountedOnce(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"backend killed", "runner cut off"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newRunsTable(t, d.Pool)
			pool, partition := d.PartitionablePool(t, nil)
			victim := newDeduper(t, pool, nil)
			others := fourInstances(t, d, nil)[:3]
			ctx := context.Background()
			opts := jobs.DebounceOptions{Quiet: 50 * time.Millisecond, MaxWait: time.Second}
			for i := 1; i <= 10; i++ {
				_, err := others[i%3].Debounce(ctx, "k", i, opts)
				require.NoError(t, err)
			}
			// The victim runs alone first: it claims the run, writes, and is killed.
			killed := make(chan struct{})
			victimCtx, stopVictim := context.WithCancel(ctx)
			defer stopVictim()
			victimDone := make(chan error, 1)
			go func() {
				victimDone <- victim.RunDebounced(victimCtx, &jobs.RunnerOptions{TTL: 2 * time.Second, RetryDelay: 10 * time.Millisecond},
					func(ctx context.Context, tx pgx.Tx, run jobs.DebouncedRun) error {
						if err := recordRun(ctx, tx, run); err != nil {
							return err
						}
						if run.Attempt > 1 {
							return nil
						}
						defer close(killed)
						if how == "backend killed" {
							// The commit then fails.
							_, err := d.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, tx.Conn().PgConn().PID())
							return err
						}
						partition()
						<-ctx.Done() // canceled when its lease is lost
						return nil
					})
			}()
			testdb.Receive(t, killed)
			startRunners(t, others, &jobs.RunnerOptions{PollInterval: 50 * time.Millisecond}, recordRun)
			runs := runsOf(t, d.Pool, "k")
			require.Len(t, runs, 1, "one run's effects committed")
			requireEveryDeliveryCountedOnce(t, runs, 10)
			var attempt int
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT attempt FROM debounced_runs`).Scan(&attempt))
			require.Equal(t, 2, attempt, "the run that committed is the second attempt")
			stopVictim()
			require.NoError(t, testdb.Receive(t, victimDone))
		})
	}
}

func TestDebounceRefusesBadInputAndRecordsNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	good := jobs.DebounceOptions{Quiet: time.Second, MaxWait: time.Minute}
	for _, tc := range []struct {
		name    string
		key     string
		payload any
		opts    jobs.DebounceOptions
	}{
		{"quiet 0", "k", 1, jobs.DebounceOptions{MaxWait: time.Minute}},
		{"negative quiet", "k", 1, jobs.DebounceOptions{Quiet: -time.Second, MaxWait: time.Minute}},
		{"quiet not whole milliseconds", "k", 1, jobs.DebounceOptions{Quiet: 1500 * time.Microsecond, MaxWait: time.Minute}},
		{"max wait under quiet", "k", 1, jobs.DebounceOptions{Quiet: time.Second, MaxWait: 999 * time.Millisecond}},
		{"max wait over the limit", "k", 1, jobs.DebounceOptions{Quiet: time.Second, MaxWait: jobs.MaxWindow + time.Hour}},
		{"payload over the limit", "k", strings.Repeat("x", jobs.MaxPayload), good},
		{"payload JSON cannot encode", "k", func() {}, good},
		{"payload with NUL", "k", "a\x00", good},
		{"empty key", "", 1, good},
		{"scope too long", "k", 1, jobs.DebounceOptions{Scope: strings.Repeat("s", 256), Quiet: time.Second, MaxWait: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dd.Debounce(ctx, tc.key, tc.payload, tc.opts)
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		})
	}
	t.Run("runner options", func(t *testing.T) {
		fn := func(context.Context, pgx.Tx, jobs.DebouncedRun) error { return nil }
		for _, o := range []jobs.RunnerOptions{{Workers: -1}, {RetryDelay: -time.Second}, {PollInterval: time.Millisecond}} {
			require.ErrorIs(t, dd.RunDebounced(ctx, &o, fn), pglock.ErrInvalidArgument, "%+v", o)
		}
		require.ErrorIs(t, dd.RunDebounced(ctx, &jobs.RunnerOptions{TTL: time.Millisecond}, fn), pglock.ErrInvalidTTL)
		require.ErrorIs(t, dd.RunDebounced(ctx, nil, nil), pglock.ErrInvalidArgument)
	})
	t.Run("the SQL contract", func(t *testing.T) {
		for _, tc := range []struct{ name, args, column string }{
			{"no payload", `'', 'k', NULL, 1000, 1000`, "p_payload"},
			{"payload over the limit", `'', 'k', to_jsonb(repeat('x', 65536)), 1000, 1000`, "p_payload"},
			{"quiet 0", `'', 'k', '1', 0, 1000`, "p_quiet_ms"},
			{"max wait under quiet", `'', 'k', '1', 1000, 999`, "p_max_wait_ms"},
			{"empty key", `'', '', '1', 1000, 1000`, "p_key"},
		} {
			_, err := d.Pool.Exec(ctx, fmt.Sprintf(`SELECT pglock_job_debounce(%s)`, tc.args))
			require.ErrorIs(t, db.Translate(err), pglock.ErrInvalidArgument, tc.name)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), tc.name)
			require.Equal(t, tc.column, pgErr.ColumnName, tc.name)
		}
	})
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_job_debounces`).Scan(&rows))
	require.Zero(t, rows, "bad input records nothing")
}

// Pending says when the key is due, and a delivery while it runs waits for the next run.
func TestDebounceAnswersTheDueTimeAndWhetherARunIsUnderWay(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRunsTable(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	opts := jobs.DebounceOptions{Quiet: 200 * time.Millisecond, MaxWait: 10 * time.Second}
	first, err := dd.Debounce(ctx, "k", 1, opts)
	require.NoError(t, err)
	second, err := dd.Debounce(ctx, "k", 2, opts)
	require.NoError(t, err)
	require.Equal(t, 1, first.Deliveries)
	require.Equal(t, 2, second.Deliveries)
	require.True(t, second.DueAt.After(first.DueAt), "a delivery moves the due time later")
	require.False(t, second.Running)

	running := make(chan struct{})
	finish := make(chan struct{})
	startRunners(t, []*jobs.Deduper{dd}, nil, func(ctx context.Context, tx pgx.Tx, run jobs.DebouncedRun) error {
		if run.Deliveries == 2 {
			close(running)
			<-finish
		}
		return recordRun(ctx, tx, run)
	})
	testdb.Receive(t, running)
	during, err := dd.Debounce(ctx, "k", 3, opts)
	require.NoError(t, err)
	close(finish)
	runs := runsOf(t, d.Pool, "k")
	require.True(t, during.Running)
	require.Equal(t, 1, during.Deliveries, "a delivery during the run starts the next cycle")
	require.Len(t, runs, 2)
	requireEveryDeliveryCountedOnce(t, runs, 3)
}

// A panic in fn is the run's failure: the runner goes on, and the run runs again, once.
func TestARunThatPanicsRunsAgainAndTheRunnerGoesOn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRunsTable(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	_, err := dd.Debounce(context.Background(), "k", 1, jobs.DebounceOptions{Quiet: time.Millisecond, MaxWait: time.Second})
	require.NoError(t, err)
	startRunners(t, []*jobs.Deduper{dd}, &jobs.RunnerOptions{RetryDelay: 10 * time.Millisecond}, func(ctx context.Context, tx pgx.Tx, run jobs.DebouncedRun) error {
		if err := recordRun(ctx, tx, run); err != nil {
			return err
		}
		if run.Attempt == 1 {
			panic("a bug in fn")
		}
		return nil
	})
	runs := runsOf(t, d.Pool, "k")
	requireEveryDeliveryCountedOnce(t, runs, 1)
	var attempt int
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT attempt FROM debounced_runs`).Scan(&attempt))
	require.Equal(t, 2, attempt, "the panicking attempt's write was rolled back")
}
