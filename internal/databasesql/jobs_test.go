package databasesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

func newDeduper(t *testing.T, d *testdb.DB) *jobs.Deduper {
	t.Helper()
	dd, err := jobs.New(d.NewPool(t, nil), &jobs.Config{AppName: "databasesql-test"})
	require.NoError(t, err)
	return dd
}

func newEffects(t *testing.T, d *testdb.DB) {
	t.Helper()
	_, err := d.Pool.Exec(context.Background(), `CREATE TABLE effects (key text NOT NULL)`)
	require.NoError(t, err)
}

func effects(t *testing.T, d *testdb.DB, key string) int {
	t.Helper()
	return count(t, d, "SELECT count(*) FROM effects WHERE key = $1", key)
}

func insertEffect(key string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (key) VALUES ($1)", key)
		return err
	}
}

// The outcome commits with fn's writes in the *sql.Tx, and a duplicate delivery gets it
// without running fn.
func TestRunTxSQLCommitsTheOutcomeWithTheEffect(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newEffects(t, d)
		dd := newDeduper(t, d)
		res, err := dd.RunTxSQL(ctx, sqlDB, "k", nil, insertEffect("k"))
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeRan, res.Outcome)
		require.Equal(t, 1, res.Attempts)
		require.NotZero(t, res.Token)
		require.True(t, res.FinishedAt.After(res.StartedAt))

		dup, err := dd.RunTxSQL(ctx, sqlDB, "k", nil, func(context.Context, *sql.Tx) error {
			t.Error("a duplicate of a key done ran")
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeAlreadyDone, dup.Outcome)
		require.Equal(t, res.Token, dup.Token)
		require.Equal(t, 1, effects(t, d, "k"))
	})
}

// A failed attempt (fn's error, or a transaction fn left aborted) rolls back its writes and is
// recorded; the next delivery runs the key.
func TestRunTxSQLRollsBackAFailedAttemptAndTheNextDeliveryRunsIt(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newEffects(t, d)
		dd := newDeduper(t, d)
		boom := errors.New("boom")
		_, err := dd.RunTxSQL(ctx, sqlDB, "k", nil, func(ctx context.Context, tx *sql.Tx) error {
			return errors.Join(insertEffect("k")(ctx, tx), boom)
		})
		require.ErrorIs(t, err, boom)
		require.Zero(t, effects(t, d, "k"), "the failed attempt's writes are rolled back")
		rec, err := dd.Status(ctx, "k")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusFailed, rec.Status)
		require.Equal(t, "boom", rec.LastError)

		_, err = dd.RunTxSQL(ctx, sqlDB, "k", nil, func(ctx context.Context, tx *sql.Tx) error {
			tx.ExecContext(ctx, "SELECT 1/0")
			return nil
		})
		require.ErrorContains(t, err, "aborted")

		res, err := dd.RunTxSQL(ctx, sqlDB, "k", nil, insertEffect("k"))
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeRan, res.Outcome)
		require.Equal(t, 3, res.Attempts)
		require.Equal(t, 1, effects(t, d, "k"))
	})
}

// An attempt whose backend is killed before COMMIT leaves no writes and no outcome, and does
// not count towards MaxAttempts, whether fn returned nil or the error its next statement got
// (57P01, or "driver: bad connection"): the next delivery runs it.
func TestRunTxSQLWhoseBackendIsKilledLeavesNoWritesAndTheNextDeliveryRunsIt(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		newEffects(t, d)
		for _, fnReturns := range []string{"nil", "its next statement's error"} {
			t.Run("fn returns "+fnReturns, func(t *testing.T) {
				ctx := context.Background()
				key := "k " + fnReturns
				dd := newDeduper(t, d)
				opts := &jobs.Options{MaxAttempts: 1}
				_, err := dd.RunTxSQL(ctx, sqlDB, key, opts, func(ctx context.Context, tx *sql.Tx) error {
					require.NoError(t, insertEffect(key)(ctx, tx))
					kill(t, ctx, d, backendOf(t, ctx, tx))
					if fnReturns == "nil" {
						return nil
					}
					err := insertEffect(key)(ctx, tx)
					require.Error(t, err)
					return err
				})
				require.Error(t, err)
				require.Zero(t, effects(t, d, key), "the killed attempt's writes are absent")
				_, err = dd.Status(ctx, key)
				require.ErrorIs(t, err, pglock.ErrNotFound, "nor is there a record: the attempt does not count")

				ran := false
				res, err := dd.RunTxSQL(ctx, sqlDB, key, opts, func(ctx context.Context, tx *sql.Tx) error {
					ran = true
					return insertEffect(key)(ctx, tx)
				})
				require.NoError(t, err)
				require.True(t, ran)
				require.Equal(t, jobs.OutcomeRan, res.Outcome)
				require.Equal(t, 1, effects(t, d, key))
			})
		}
	})
}

// An attempt whose statement fn's own context ends is fn's failure, whatever the driver does
// with the connection: it counts towards MaxAttempts, and a job that always times out is given
// up on rather than delivered for ever.
func TestRunTxSQLWhoseOwnTimeoutEndsItsStatementCounts(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		dd := newDeduper(t, d)
		opts := &jobs.Options{MaxAttempts: 1}
		for round := range 5 { // the failure must be recorded every time, not only when the server is quick
			key := fmt.Sprint("slow-", round)
			_, err := dd.RunTxSQL(ctx, sqlDB, key, opts, func(ctx context.Context, tx *sql.Tx) error {
				statementCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
				_, err := tx.ExecContext(statementCtx, "SELECT pg_sleep(30)")
				return err
			})
			require.Error(t, err)
			_, err = dd.RunTxSQL(ctx, sqlDB, key, opts, func(context.Context, *sql.Tx) error {
				t.Errorf("%s: a key whose one attempt failed ran again", key)
				return nil
			})
			require.ErrorIs(t, err, pglock.ErrGaveUp, key)
		}
	})
}

// Sixteen deliveries of one key through four instances, each with a *sql.DB and a Deduper of
// its own, run it once.
func TestConcurrentDeliveriesThroughRunTxSQLRunTheKeyOnce(t *testing.T) {
	t.Parallel()
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newEffects(t, d)
			type instance struct {
				dd    *jobs.Deduper
				sqlDB *sql.DB
			}
			var instances []instance
			for range 4 {
				instances = append(instances, instance{newDeduper(t, d), openDB(t, driver, d.URL())})
			}
			var ran atomic.Int32
			start := make(chan struct{})
			outcomes := make(chan jobs.Outcome, 16)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					<-start
					in := instances[i%4]
					res, err := in.dd.RunTxSQL(context.Background(), in.sqlDB, "order-1", nil, func(ctx context.Context, tx *sql.Tx) error {
						ran.Add(1)
						err := insertEffect("order-1")(ctx, tx)
						time.Sleep(20 * time.Millisecond) // overlap the other deliveries
						return err
					})
					assert.NoError(t, err)
					outcomes <- res.Outcome
				})
			}
			close(start)
			wg.Wait()
			close(outcomes)
			counts := map[jobs.Outcome]int{}
			for o := range outcomes {
				counts[o]++
			}
			require.Equal(t, int32(1), ran.Load(), "fn runs once")
			require.Equal(t, 1, counts[jobs.OutcomeRan])
			require.Equal(t, 15, counts[jobs.OutcomeAlreadyDone]+counts[jobs.OutcomeInProgress], "%v", counts)
			require.Equal(t, 1, effects(t, d, "order-1"))
		})
	}
}

// fn must not end RunTxSQL's transaction. If it commits it itself, the misuse is reported and
// the outcome, written with the claim, commits with fn's writes: the effect still happens once.
// If it rolls it back itself, the attempt is recorded as failed, and the next delivery runs it.
func TestRunTxSQLWhoseFnEndsItsTransactionKeepsTheOutcomeWithTheEffect(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newEffects(t, d)
		dd := newDeduper(t, d)
		_, err := dd.RunTxSQL(ctx, sqlDB, "committed", nil, func(ctx context.Context, tx *sql.Tx) error {
			require.NoError(t, insertEffect("committed")(ctx, tx))
			return tx.Commit()
		})
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		require.ErrorContains(t, err, "it committed, and the outcome written with the claim, succeeded, with it")
		rec, err := dd.Status(ctx, "committed")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusSucceeded, rec.Status)
		dup, err := dd.RunTxSQL(ctx, sqlDB, "committed", nil, insertEffect("committed"))
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeAlreadyDone, dup.Outcome)
		require.Equal(t, 1, effects(t, d, "committed"))

		_, err = dd.RunTxSQL(ctx, sqlDB, "rolled back", nil, func(ctx context.Context, tx *sql.Tx) error {
			require.NoError(t, insertEffect("rolled back")(ctx, tx))
			return tx.Rollback()
		})
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		require.ErrorContains(t, err, "recorded after the fact, as failed")
		rec, err = dd.Status(ctx, "rolled back")
		require.NoError(t, err)
		require.Equal(t, jobs.StatusFailed, rec.Status)
		boom := errors.New("boom")
		_, err = dd.RunTxSQL(ctx, sqlDB, "rolled back", nil, func(ctx context.Context, tx *sql.Tx) error {
			require.NoError(t, tx.Rollback())
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, "the misuse is reported when fn fails too")
		res, err := dd.RunTxSQL(ctx, sqlDB, "rolled back", nil, insertEffect("rolled back"))
		require.NoError(t, err)
		require.Equal(t, jobs.OutcomeRan, res.Outcome)
		require.Equal(t, 3, res.Attempts)
		require.Equal(t, 1, effects(t, d, "rolled back"))
	})
}

// A duplicate delivered while a RunTxSQL run is under way waits for its outcome (Options.Wait)
// and gets it once the run commits, and fn runs once.
func TestRunTxSQLDuplicateThatWaitsGetsTheOutcome(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		newEffects(t, d)
		first, second := newDeduper(t, d), newDeduper(t, d)
		running, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := first.RunTxSQL(ctx, sqlDB, "k", nil, func(ctx context.Context, tx *sql.Tx) error {
				close(running)
				<-release
				return insertEffect("k")(ctx, tx)
			})
			done <- err
		}()
		<-running
		waited := make(chan jobs.Result, 1)
		go func() {
			res, err := second.RunTxSQL(ctx, sqlDB, "k", &jobs.Options{Wait: true}, func(context.Context, *sql.Tx) error {
				t.Error("a duplicate ran")
				return nil
			})
			assert.NoError(t, err)
			waited <- res
		}()
		testdb.WaitFor(t, func() bool { return count(t, d, "SELECT count(*) FROM pglock_job_waiters") == 1 })
		close(release)
		require.NoError(t, testdb.Receive(t, done))
		require.Equal(t, jobs.OutcomeAlreadyDone, testdb.Receive(t, waited).Outcome)
		require.Equal(t, 1, effects(t, d, "k"))
	})
}
