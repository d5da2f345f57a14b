package jobs_test

import (
	"context"
	"errors"
	"fmt"
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

// fourInstances returns four Dedupers, each on a pool of its own.
func fourInstances(t *testing.T, d *testdb.DB, cfg func() *jobs.Config) []*jobs.Deduper {
	t.Helper()
	instances := make([]*jobs.Deduper, 4)
	for i := range instances {
		var c *jobs.Config
		if cfg != nil {
			c = cfg()
		}
		instances[i] = newDeduper(t, d.NewPool(t, nil), c)
	}
	return instances
}

// deliverRound delivers key once from each of 16 goroutines, four per instance, while the
// attempt that runs holds fn until every other delivery has been answered; it returns how many
// ran and the answers of the others.
func deliverRound(t *testing.T, instances []*jobs.Deduper, key string, opts *jobs.Options, fnErr error) (ran int, others []jobs.Outcome) {
	t.Helper()
	const deliveries = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		answered = make(chan struct{}, deliveries)
		errs     []error
	)
	release := make(chan struct{})
	go func() {
		// Bounded: were two attempts to run at once, fewer would answer, and the count shows it.
		timeout := time.After(30 * time.Second)
		for range deliveries - 1 {
			select {
			case <-answered:
			case <-timeout:
				close(release)
				return
			}
		}
		close(release)
	}()
	for i := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := instances[i%len(instances)].Run(context.Background(), key, opts, func(context.Context) error {
				<-release
				return fnErr
			})
			mu.Lock()
			defer mu.Unlock()
			if res.Outcome == jobs.OutcomeRan {
				ran++
				if !errors.Is(err, fnErr) {
					errs = append(errs, err)
				}
				return
			}
			others = append(others, res.Outcome)
			if err != nil {
				errs = append(errs, err)
			}
			answered <- struct{}{}
		}()
	}
	wg.Wait()
	require.Empty(t, errs)
	return ran, others
}

func TestWhileRunningRefusesDuplicatesOnlyWhileAnAttemptRuns(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	instances := fourInstances(t, d, nil)
	opts := &jobs.Options{Mode: jobs.WhileRunning}
	failed := errors.New("fn failed")
	for round, fnErr := range []error{nil, nil, failed, nil} {
		ran, others := deliverRound(t, instances, "singleton", opts, fnErr)
		require.Equal(t, 1, ran, "round %d: one attempt at a time", round)
		for _, o := range others {
			require.Equal(t, jobs.OutcomeInProgress, o, "round %d: a duplicate while it runs is in progress", round)
		}
	}
	rec, err := instances[0].Status(context.Background(), "singleton")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, rec.Status)
	require.Equal(t, 2, rec.Attempts, "a success ends the cycle; the failed attempt and its retry are one")

	// The default mode on the same record: done, as it succeeded.
	res, err := instances[1].Run(context.Background(), "singleton", nil, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
}

func TestWhileRunningWithWaitRunsDeliveriesOneAfterTheOther(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	instances := fourInstances(t, d, nil)
	opts := &jobs.Options{Mode: jobs.WhileRunning, Wait: true}
	var (
		mu      sync.Mutex
		running int
		overlap bool
		wg      sync.WaitGroup
	)
	const deliveries = 12
	for i := range deliveries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := instances[i%4].Run(context.Background(), "serial", opts, func(context.Context) error {
				mu.Lock()
				running++
				overlap = overlap || running > 1
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil || res.Outcome != jobs.OutcomeRan {
				t.Errorf("delivery %d: %v, %v", i, res.Outcome, err)
			}
		}()
	}
	wg.Wait()
	require.False(t, overlap, "never two attempts at once")
}

// A RunTx attempt whose backend is killed leaves no record and no effect: under WhileRunning
// the next delivery runs the key at once.
func TestWhileRunningAfterAKilledBackendRunsTheNextDelivery(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	instances := fourInstances(t, d, nil)
	ctx := context.Background()
	opts := &jobs.Options{Mode: jobs.WhileRunning}
	insert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
		return err
	}
	_, err := instances[0].RunTx(ctx, "k", opts, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx))
		// Meanwhile, the other instances find it running.
		for _, other := range instances[1:] {
			res, err := other.RunTx(ctx, "k", opts, insert)
			require.NoError(t, err)
			require.Equal(t, jobs.OutcomeInProgress, res.Outcome)
		}
		killBackend(t, d.Pool, tx.Conn().PgConn())
		return nil
	})
	require.Error(t, err)
	require.Zero(t, effects(t, d.Pool, "k"))
	for i, dd := range instances {
		res, err := dd.RunTx(ctx, "k", opts, insert)
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeRan, res.Outcome, "instance %d runs it: the last run ended", i)
	}
	require.Equal(t, 4, effects(t, d.Pool, "k"))
}

func killBackend(t *testing.T, pool *pgxpool.Pool, conn *pgconn.PgConn) {
	t.Helper()
	var killed bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, conn.PID()).Scan(&killed))
	require.True(t, killed)
}

func TestPerPeriodRunsOncePerPeriodOfTheDatabasesClock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	instances := fourInstances(t, d, nil)
	const period = time.Second
	opts := &jobs.Options{Mode: jobs.PerPeriod(period)}
	ctx := context.Background()
	var (
		mu   sync.Mutex
		runs = map[int64][]int64{} // period number -> tokens of the attempts that ran in it
		wg   sync.WaitGroup
	)
	// Deliveries from every instance for over two periods: at least two periods begin.
	deadline := time.Now().Add(5 * period / 2)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				res, err := instances[i%4].Run(ctx, "daily-report", opts, func(context.Context) error { return nil })
				if err != nil {
					t.Errorf("delivery: %v", err)
					return
				}
				if res.Outcome == jobs.OutcomeRan {
					mu.Lock()
					n := res.StartedAt.UnixMilli() / period.Milliseconds()
					runs[n] = append(runs[n], res.Token)
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, len(runs), 2, "a run in each period delivered in: %v", runs)
	for n, tokens := range runs {
		require.Len(t, tokens, 1, "period %d ran once", n)
	}
}

// A RunTx attempt whose backend is killed does not count: the period's next delivery runs the
// key, once, and the period's later deliveries, on every instance, find it done.
func TestPerPeriodAfterAKilledBackendRunsOnceInThePeriod(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	instances := fourInstances(t, d, nil)
	ctx := context.Background()
	opts := &jobs.Options{Mode: jobs.PerPeriod(24 * time.Hour)}
	insert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('daily')`)
		return err
	}
	_, err := instances[0].RunTx(ctx, "daily", opts, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx))
		killBackend(t, d.Pool, tx.Conn().PgConn())
		return nil
	})
	require.Error(t, err)
	require.Zero(t, effects(t, d.Pool, "daily"))
	ranOn := map[time.Time]int{} // UTC day -> runs in it
	for i, dd := range instances {
		res, err := dd.RunTx(ctx, "daily", opts, insert)
		require.NoError(t, err)
		if i == 0 {
			require.Equal(t, jobs.OutcomeRan, res.Outcome, "the killed attempt did not count")
		}
		if res.Outcome == jobs.OutcomeRan {
			ranOn[res.StartedAt.UTC().Truncate(24*time.Hour)]++
		} else {
			require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
		}
	}
	runs := 0
	for day, n := range ranOn {
		require.Equal(t, 1, n, "one run on %s", day) // a UTC day may end between two deliveries
		runs += n
	}
	require.Equal(t, runs, effects(t, d.Pool, "daily"))
}

// Periods are counted from the Unix epoch, in UTC, whatever the session's time zone.
func TestPerPeriodBoundariesAreAlignedToTheUnixEpoch(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `SET TimeZone = 'Asia/Kolkata'`) // +05:30: a local hour is no UTC hour
	require.NoError(t, err)
	for _, tc := range []struct {
		created, now string
		period       time.Duration
		ended        bool
	}{
		{"2026-11-28 00:59:59.999+00", "2026-11-28 01:00:00+00", time.Hour, true},
		{"2026-11-28 01:00:00+00", "2026-11-28 01:59:59.999+00", time.Hour, false},
		{"2026-11-27 23:00:00+00", "2026-11-28 00:00:00.001+00", 24 * time.Hour, true},
		{"2026-11-28 00:00:00+00", "2026-11-28 23:59:59+00", 24 * time.Hour, false},
		{"2026-11-28 10:00:00+00", "2026-11-28 10:00:59+00", time.Minute, false},
	} {
		var ended bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pglock_job_cycle_ended('infinity', 'succeeded', $1::timestamptz, $2::timestamptz, 'per_period', $3)`,
			tc.created, tc.now, tc.period.Milliseconds()).Scan(&ended))
		require.Equal(t, tc.ended, ended, "first claim %s, now %s, period %s", tc.created, tc.now, tc.period)
	}
}

// The superseded attempt is told at once (its context's cause), its fence checks and its outcome
// are refused, and the writes it made through Fence all precede the newer attempt's.
func TestSupersedeFencesTheRunningAttemptAndRunsTheNewest(t *testing.T) {
	t.Parallel()
	for _, notifications := range []bool{true, false} {
		t.Run(fmt.Sprintf("notifications %v", notifications), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newEffects(t, d.Pool)
			instances := fourInstances(t, d, func() *jobs.Config {
				return &jobs.Config{DisableNotifications: !notifications}
			})
			ctx := context.Background()
			opts := &jobs.Options{Mode: jobs.Supersede, TTL: 3 * time.Second}

			type ended struct {
				res   jobs.Result
				err   error
				cause error
				fence error
			}
			endedCh := make([]chan ended, len(instances))
			started := make(chan int64, len(instances))
			for i, dd := range instances {
				endedCh[i] = make(chan ended, 1)
				go func() {
					var e ended
					e.res, e.err = dd.Run(ctx, "sync-user-7", opts, func(ctx context.Context) error {
						var token int64
						// Write through the fence until it refuses: every write is a transaction
						// that fences, inserts and commits.
						for n := 0; ; n++ {
							// Its statements ignore the cancellation: the fence alone refuses.
							err := pgx.BeginFunc(context.WithoutCancel(ctx), d.Pool, func(tx pgx.Tx) error {
								if err := jobs.Fence(ctx, tx); err != nil {
									return err
								}
								if n == 0 {
									if err := tx.QueryRow(context.Background(), `SELECT fencing_token FROM pglock_jobs WHERE job_key = 'sync-user-7'`).Scan(&token); err != nil {
										return err
									}
									started <- token
								}
								_, err := tx.Exec(context.Background(), `INSERT INTO effects (key, by_token) VALUES ('sync-user-7', $1)`, token)
								return err
							})
							if err != nil {
								e.fence = err
								break
							}
							if i == len(instances)-1 && n == 3 {
								return nil // the newest finishes
							}
							time.Sleep(5 * time.Millisecond)
						}
						<-ctx.Done() // the refusal may come before the announcement
						e.cause = context.Cause(ctx)
						return ctx.Err()
					})
					endedCh[i] <- e
				}()
				testdb.Receive(t, started) // each delivery comes once the one before runs
			}
			for i := range instances[:len(instances)-1] {
				e := testdb.Receive(t, endedCh[i])
				require.ErrorIs(t, e.err, pglock.ErrLockLost, "instance %d", i)
				require.ErrorIs(t, e.err, pglock.ErrSuperseded, "instance %d", i)
				require.ErrorIs(t, e.fence, pglock.ErrLockLost, "instance %d: its writes are refused", i)
				if notifications {
					require.ErrorIs(t, e.cause, pglock.ErrSuperseded, "instance %d", i)
				}
			}
			last := testdb.Receive(t, endedCh[len(instances)-1])
			require.NoError(t, last.err)
			require.Equal(t, jobs.OutcomeRan, last.res.Outcome)

			rec, err := instances[0].Status(ctx, "sync-user-7")
			require.NoError(t, err)
			require.Equal(t, jobs.StatusSucceeded, rec.Status)
			require.Equal(t, last.res.Token, rec.Token, "the record is the newest attempt's")
			// Every write of an older attempt committed before the first write of a newer one.
			var misordered int
			require.NoError(t, d.Pool.QueryRow(ctx, `
				SELECT count(*) FROM effects older JOIN effects newer
				    ON newer.by_token > older.by_token AND newer.at < older.at`).Scan(&misordered))
			require.Zero(t, misordered, "no write of a superseded attempt after its successor's")
		})
	}
}

// Deliveries racing one another in Supersede mode are never answered in progress: each runs,
// superseding the one before, and only the last claimed finishes.
func TestConcurrentSupersedingDeliveriesAllRunAndTheLastFinishes(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	instances := fourInstances(t, d, nil)
	const deliveries = 8
	started := make(chan struct{}, deliveries)
	release := make(chan struct{})
	type ended struct {
		res jobs.Result
		err error
	}
	results := make(chan ended, deliveries)
	for i := range deliveries {
		go func() {
			res, err := instances[i%4].Run(context.Background(), "k", &jobs.Options{Mode: jobs.Supersede}, func(ctx context.Context) error {
				started <- struct{}{}
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-release:
					return nil
				}
			})
			results <- ended{res, err}
		}()
	}
	for range deliveries {
		testdb.Receive(t, started) // every delivery ran fn
	}
	close(release)
	succeeded, superseded := 0, 0
	var last jobs.Result
	for range deliveries {
		e := testdb.Receive(t, results)
		require.Equal(t, jobs.OutcomeRan, e.res.Outcome)
		if e.err == nil {
			succeeded++
			last = e.res
			continue
		}
		require.ErrorIs(t, e.err, pglock.ErrSuperseded)
		superseded++
	}
	require.Equal(t, 1, succeeded)
	require.Equal(t, deliveries-1, superseded)
	rec, err := instances[0].Status(context.Background(), "k")
	require.NoError(t, err)
	require.Equal(t, last.Token, rec.Token, "the record is the last attempt's")
	require.Equal(t, jobs.StatusSucceeded, rec.Status)
}

// A RunTx attempt is superseded too: the newer delivery asks its runner to stop, its
// transaction rolls back (its writes with it), and the newer runs once it has ended. One whose
// backend is killed leaves nothing behind, and the next delivery runs at once.
func TestSupersedeRollsBackTheRunningTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	instances := fourInstances(t, d, nil)
	ctx := context.Background()
	opts := &jobs.Options{Mode: jobs.Supersede}
	started := make(chan int64, len(instances))
	release := make(chan struct{})
	type ended struct {
		res jobs.Result
		err error
	}
	results := make([]chan ended, len(instances))
	for i, dd := range instances {
		results[i] = make(chan ended, 1)
		go func() {
			res, err := dd.RunTx(ctx, "k", opts, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO effects (key, by_token) VALUES ('k', $1)`, i); err != nil {
					return err
				}
				started <- int64(i)
				select {
				case <-ctx.Done():
					return nil // as if it went on: the transaction must not commit all the same
				case <-release:
					return nil
				}
			})
			results[i] <- ended{res, err}
		}()
		require.Equal(t, int64(i), testdb.Receive(t, started), "each delivery runs once the one before was superseded")
	}
	close(release)
	for i := range instances[:len(instances)-1] {
		e := testdb.Receive(t, results[i])
		require.ErrorIs(t, e.err, pglock.ErrSuperseded, "instance %d", i)
	}
	last := testdb.Receive(t, results[len(instances)-1])
	require.NoError(t, last.err)
	require.Equal(t, jobs.OutcomeRan, last.res.Outcome)
	var writers []int64
	rows, err := d.Pool.Query(ctx, `SELECT by_token FROM effects`)
	require.NoError(t, err)
	writers, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{int64(len(instances) - 1)}, writers, "only the last attempt's writes committed")

	// A superseding attempt whose backend is killed: nothing of it remains, and the next runs.
	_, err = instances[0].RunTx(ctx, "k2", opts, func(ctx context.Context, tx pgx.Tx) error {
		killBackend(t, d.Pool, tx.Conn().PgConn())
		return nil
	})
	require.Error(t, err)
	res, err := instances[1].RunTx(ctx, "k2", opts, func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
}

// A superseding claim waits for a transaction that checked the running attempt's fence: when
// that transaction's backend is killed, the claim goes through, and nothing of it remains.
func TestSupersedeAfterTheFencedBackendIsKilled(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	instances := fourInstances(t, d, nil)
	ctx := context.Background()
	opts := &jobs.Options{Mode: jobs.Supersede}
	fenced := make(chan *pgconn.PgConn, 1)
	oldDone := make(chan error, 1)
	go func() {
		_, err := instances[0].Run(ctx, "k", opts, func(ctx context.Context) error {
			tx, err := d.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background())
			if err := jobs.Fence(ctx, tx); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`); err != nil {
				return err
			}
			fenced <- tx.Conn().PgConn()
			<-ctx.Done()
			return context.Cause(ctx)
		})
		oldDone <- err
	}()
	conn := testdb.Receive(t, fenced)
	type delivered struct {
		res jobs.Result
		err error
	}
	newDone := make(chan delivered, 1)
	go func() {
		res, err := instances[1].Run(ctx, "k", opts, func(context.Context) error { return nil })
		newDone <- delivered{res, err}
	}()
	// The new claim waits on the fenced row: see it wait, then kill the fenced transaction.
	testdb.WaitFor(t, func() bool {
		var waiting bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%claim_in_mode%')`).Scan(&waiting))
		return waiting
	}, "the superseding claim waits for the fenced transaction")
	killBackend(t, d.Pool, conn)
	got := testdb.Receive(t, newDone)
	require.NoError(t, got.err)
	require.Equal(t, jobs.OutcomeRan, got.res.Outcome)
	require.ErrorIs(t, testdb.Receive(t, oldDone), pglock.ErrSuperseded)
	require.Zero(t, effects(t, d.Pool, "k"), "the killed transaction's write is gone")
	for _, dd := range instances[2:] {
		res, err := dd.Run(ctx, "k", opts, func(context.Context) error { return nil })
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome, "a key that succeeded is done, as in the default mode")
	}
}

func TestModesRefuseWhatContradictsThemAndWriteNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts jobs.Options
	}{
		{"period 0", jobs.Options{Mode: jobs.PerPeriod(0)}},
		{"negative period", jobs.Options{Mode: jobs.PerPeriod(-time.Hour)}},
		{"period not whole milliseconds", jobs.Options{Mode: jobs.PerPeriod(1500 * time.Microsecond)}},
		{"period over the limit", jobs.Options{Mode: jobs.PerPeriod(jobs.MaxWindow + time.Hour)}},
		{"supersede and wait", jobs.Options{Mode: jobs.Supersede, Wait: true}},
		{"supersede and max attempts", jobs.Options{Mode: jobs.Supersede, MaxAttempts: 3}},
		{"supersede and fingerprint", jobs.Options{Mode: jobs.Supersede, Fingerprint: "f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dd.Run(ctx, "k", &tc.opts, func(context.Context) error { return nil })
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			_, err = dd.RunTx(ctx, "k", &tc.opts, func(context.Context, pgx.Tx) error { return nil })
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		})
	}
	t.Run("a batch in another mode than the default", func(t *testing.T) {
		_, err := dd.RunTxBatch(ctx, []string{"a", "b"}, &jobs.Options{Mode: jobs.WhileRunning},
			func(context.Context, pgx.Tx, []string) error { return nil })
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	})
	t.Run("supersede in a transaction without notifications", func(t *testing.T) {
		quiet := newDeduper(t, d.Pool, &jobs.Config{DisableNotifications: true})
		_, err := quiet.RunTx(ctx, "k", &jobs.Options{Mode: jobs.Supersede}, func(context.Context, pgx.Tx) error { return nil })
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	})
	t.Run("fence outside fn", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return jobs.Fence(ctx, tx) })
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	})
	t.Run("the SQL contract", func(t *testing.T) {
		for _, tc := range []struct{ name, args, column string }{
			{"unknown mode", `'nope', NULL`, "p_mode"},
			{"no mode", `NULL, NULL`, "p_mode"},
			{"per period without a period", `'per_period', NULL`, "p_period_ms"},
			{"a period in another mode", `'while_running', 1000`, "p_period_ms"},
			{"a window shorter than the period", `'per_period', 7200000`, "p_window_ms"},
		} {
			_, err := d.Pool.Exec(ctx, fmt.Sprintf(`SELECT pglock_job_claim_in_mode('', 'k', 'h', 'i', false, 1000, NULL, 3600000, 0, 0, %s)`, tc.args))
			require.ErrorIs(t, db.Translate(err), pglock.ErrInvalidArgument, tc.name)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tc.column, pgErr.ColumnName, tc.name)
		}
	})
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_jobs`).Scan(&rows))
	require.Zero(t, rows, "bad input writes nothing")
}
