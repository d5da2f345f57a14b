package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func newDeduper(t *testing.T, pool *pgxpool.Pool, cfg *jobs.Config) *jobs.Deduper {
	t.Helper()
	if cfg == nil {
		cfg = &jobs.Config{}
	}
	cfg.AppName = "jobs-test"
	d, err := jobs.New(pool, cfg)
	require.NoError(t, err)
	return d
}

// newEffects makes the table where a job's effect is a row, inserted by fn.
func newEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (key text NOT NULL, by_token bigint, at timestamptz DEFAULT clock_timestamp())`)
	require.NoError(t, err)
}

func effects(t *testing.T, pool *pgxpool.Pool, key string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE key = $1`, key).Scan(&n))
	return n
}

func TestConcurrentDeliveriesOfOneKeyRunItOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"Run", "RunTx"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newEffects(t, d.Pool)
			var dedupers []*jobs.Deduper
			for range 4 {
				dedupers = append(dedupers, newDeduper(t, d.NewPool(t, nil), nil))
			}
			var ran atomic.Int32
			start := make(chan struct{})
			results := make(chan jobs.Result, 16)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					dd := dedupers[i%4]
					var res jobs.Result
					var err error
					if mode == "Run" {
						res, err = dd.Run(context.Background(), "order-1", nil, func(ctx context.Context) error {
							ran.Add(1)
							time.Sleep(20 * time.Millisecond) // overlap the other deliveries
							_, err := d.Pool.Exec(ctx, `INSERT INTO effects (key) VALUES ('order-1')`)
							return err
						})
					} else {
						res, err = dd.RunTx(context.Background(), "order-1", nil, func(ctx context.Context, tx pgx.Tx) error {
							ran.Add(1)
							_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('order-1')`)
							time.Sleep(20 * time.Millisecond)
							return err
						})
					}
					assert.NoError(t, err)
					results <- res
				}()
			}
			close(start)
			wg.Wait()
			close(results)
			counts := map[jobs.Outcome]int{}
			for res := range results {
				counts[res.Outcome]++
			}
			require.Equal(t, int32(1), ran.Load(), "fn runs once")
			require.Equal(t, 1, counts[jobs.OutcomeRan])
			require.Equal(t, 15, counts[jobs.OutcomeAlreadyDone]+counts[jobs.OutcomeInProgress], "%v", counts)
			require.Equal(t, 1, effects(t, d.Pool, "order-1"))
			rec, err := dedupers[0].Status(context.Background(), "order-1")
			require.NoError(t, err)
			require.Equal(t, jobs.StatusSucceeded, rec.Status)
			require.Equal(t, 1, rec.Attempts)
		})
	}
}

func TestRunTxCommitsTheOutcomeWithTheEffect(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()

	res, err := dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 1, res.Attempts)
	require.NotZero(t, res.Token)
	require.True(t, res.FinishedAt.After(res.StartedAt))

	dup, err := dd.RunTx(ctx, "k", nil, func(context.Context, pgx.Tx) error {
		t.Error("a duplicate of a key done ran")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, dup.Outcome)
	require.Equal(t, res.Token, dup.Token)
	require.Equal(t, 1, effects(t, d.Pool, "k"))
}

func TestRunTxRollsBackAFailedAttemptAndTheNextDeliveryRunsIt(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	boom := errors.New("boom")

	res, err := dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
		require.NoError(t, err)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Zero(t, effects(t, d.Pool, "k"), "the failed attempt's writes are rolled back")
	rec, err := dd.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusFailed, rec.Status)
	require.Equal(t, "boom", rec.LastError)

	// An aborted transaction is a failure even when fn says nothing.
	_, err = dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
		tx.Exec(ctx, `SELECT 1/0`)
		return nil
	})
	require.ErrorContains(t, err, "aborted")

	res, err = dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 3, res.Attempts)
	require.Equal(t, 1, effects(t, d.Pool, "k"))
}

// An attempt whose backend is killed before COMMIT leaves no writes and no outcome, and does
// not count towards MaxAttempts, whether fn returned nil or the error its next statement got:
// the next delivery runs it.
func TestRunTxWhoseBackendIsKilledLeavesNoWritesAndTheNextDeliveryRunsIt(t *testing.T) {
	t.Parallel()
	for _, fnReturns := range []string{"nil", "its next statement's error", "nil, swallowing its next statement's error"} {
		t.Run("fn returns "+fnReturns, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newEffects(t, d.Pool)
			dd := newDeduper(t, d.NewPool(t, nil), nil)
			ctx := context.Background()
			opts := &jobs.Options{MaxAttempts: 1}

			_, err := dd.RunTx(ctx, "k", opts, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
				require.NoError(t, err)
				var killed bool
				require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, tx.Conn().PgConn().PID()).Scan(&killed))
				require.True(t, killed)
				if fnReturns == "nil" {
					return nil
				}
				_, err = tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
				require.Error(t, err)
				if fnReturns != "its next statement's error" {
					return nil
				}
				return err
			})
			require.Error(t, err)
			require.Zero(t, effects(t, d.Pool, "k"), "the killed attempt's writes are absent")
			_, err = dd.Status(ctx, "k")
			require.ErrorIs(t, err, pglock.ErrNotFound, "nor is there a record: the attempt does not count")

			ran := false
			res, err := dd.RunTx(ctx, "k", opts, func(ctx context.Context, tx pgx.Tx) error {
				ran = true
				_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('k')`)
				return err
			})
			require.NoError(t, err)
			require.True(t, ran)
			require.Equal(t, jobs.OutcomeRan, res.Outcome)
			require.Equal(t, 1, effects(t, d.Pool, "k"))
		})
	}
}

// An attempt whose statement fn's own context ends (pgx then closes the connection) is fn's
// failure: it counts towards MaxAttempts, and a job that always times out is given up on.
func TestRunTxWhoseOwnTimeoutEndsItsConnectionCounts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.NewPool(t, nil), nil)
	ctx := context.Background()
	opts := &jobs.Options{MaxAttempts: 1}
	_, err := dd.RunTx(ctx, "slow", opts, func(ctx context.Context, tx pgx.Tx) error {
		statementCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := tx.Exec(statementCtx, "SELECT pg_sleep(30)")
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = dd.RunTx(ctx, "slow", opts, func(context.Context, pgx.Tx) error {
		t.Error("a key whose one attempt failed ran again")
		return nil
	})
	require.ErrorIs(t, err, pglock.ErrGaveUp)
}

func TestRunFailsThenRetriesUntilMaxAttempts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	opts := &jobs.Options{MaxAttempts: 2}
	fail := func(context.Context) error { return errors.New("partner API down") }

	res, err := dd.Run(ctx, "k", opts, fail)
	require.ErrorContains(t, err, "partner API down")
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 1, res.Attempts)

	res, err = dd.Run(ctx, "k", opts, fail)
	require.ErrorContains(t, err, "partner API down")
	require.Equal(t, 2, res.Attempts)

	_, err = dd.Run(ctx, "k", opts, func(context.Context) error {
		t.Error("ran after MaxAttempts")
		return nil
	})
	require.ErrorIs(t, err, pglock.ErrGaveUp)
	require.ErrorContains(t, err, "partner API down")

	// A delivery that allows more attempts retries, and succeeds.
	res, err = dd.Run(ctx, "k", &jobs.Options{MaxAttempts: 3}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 3, res.Attempts)
	rec, err := dd.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, rec.Status)
	require.Equal(t, "partner API down", rec.LastError, "the last failure stays on the record")
}

func TestPartitionedRunnerIsCanceledBeforeItsLeaseExpiresAndItsOutcomeIsRefused(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool, partition := d.PartitionablePool(t, nil)
	stale := newDeduper(t, pool, nil)
	other := newDeduper(t, d.Pool, nil)
	// A margin (a tenth of the TTL) of a second: the time a busy machine may take to run the
	// loss's timer, which must fire before the database could give the lease away.
	ctx := context.Background()
	opts := &jobs.Options{TTL: 10 * time.Second}

	type canceled struct {
		cause     error
		leaseLive bool
	}
	seen := make(chan canceled, 1)
	resume := make(chan struct{})
	staleDone := make(chan error, 1)
	var heal func()
	go func() {
		_, err := stale.Run(ctx, "k", opts, func(ctx context.Context) error {
			heal = partition()
			live := testdb.LiveWhenDone(t, ctx, d.Pool, `SELECT lease_expires_at FROM pglock_jobs WHERE job_key = 'k'`)
			seen <- canceled{cause: context.Cause(ctx), leaseLive: live}
			<-resume
			return nil // as if the effect went through anyway
		})
		staleDone <- err
	}()
	c := testdb.Receive(t, seen)
	require.ErrorIs(t, c.cause, pglock.ErrLockLost)
	require.True(t, c.leaseLive, "the runner is told before its lease could expire on the database")

	// Another delivery waits for the stale claim to expire, and takes it over.
	res, err := other.Run(ctx, "k", &jobs.Options{Wait: true}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 2, res.Attempts)

	heal()
	close(resume)
	err = testdb.Receive(t, staleDone)
	require.ErrorIs(t, err, pglock.ErrLockLost, "the stale runner's outcome is refused")
	rec, err := other.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, rec.Status)
	require.Equal(t, res.Token, rec.Token, "the record is the second attempt's")
}

func TestFingerprintMismatchIsRefusedOnEveryPath(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	noRun := func(context.Context) error {
		t.Error("ran with a mismatched fingerprint")
		return nil
	}
	a := &jobs.Options{Fingerprint: "sha256:aaaa"}
	b := &jobs.Options{Fingerprint: "sha256:bbbb"}

	// Failed record.
	_, err := dd.Run(ctx, "failed", a, func(context.Context) error { return errors.New("x") })
	require.Error(t, err)
	_, err = dd.Run(ctx, "failed", b, noRun)
	require.ErrorIs(t, err, pglock.ErrFingerprintMismatch)

	// Running record.
	running := make(chan struct{})
	finish := make(chan struct{})
	go dd.Run(ctx, "running", a, func(context.Context) error { close(running); <-finish; return nil })
	<-running
	_, err = dd.Run(ctx, "running", b, noRun)
	require.ErrorIs(t, err, pglock.ErrFingerprintMismatch)
	_, err = dd.RunTx(ctx, "running", b, func(context.Context, pgx.Tx) error { return noRun(ctx) })
	require.ErrorIs(t, err, pglock.ErrFingerprintMismatch)
	close(finish)

	// Done record: the fast path.
	_, err = dd.Run(ctx, "done", a, func(context.Context) error { return nil })
	require.NoError(t, err)
	_, err = dd.Run(ctx, "done", b, noRun)
	require.ErrorIs(t, err, pglock.ErrFingerprintMismatch)
	res, err := dd.Run(ctx, "done", a, noRun)
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
	res, err = dd.Run(ctx, "done", nil, noRun)
	require.NoError(t, err, "a delivery without a fingerprint matches any")
	require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
}

func TestDuplicateOfAKeyRunningElsewhereReturnsAtOnceOrWaitsForItsOutcome(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"Run", "RunTx"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			first := newDeduper(t, d.NewPool(t, nil), nil)
			second := newDeduper(t, d.NewPool(t, nil), nil)
			ctx := context.Background()
			running := make(chan struct{})
			finish := make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				var err error
				if mode == "Run" {
					_, _, err = jobs.Do(ctx, first, "k", nil, func(context.Context) (string, error) {
						close(running)
						<-finish
						return "receipt-7", nil
					})
				} else {
					_, err = first.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
						close(running)
						<-finish
						return nil
					})
				}
				firstDone <- err
			}()
			<-running

			res, err := second.Run(ctx, "k", nil, func(context.Context) error {
				t.Error("a duplicate ran while the first ran")
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, jobs.OutcomeInProgress, res.Outcome, "never blocks behind the other attempt")

			waited := make(chan jobs.Result, 1)
			var saved string
			go func() {
				v, res, err := jobs.Do(ctx, second, "k", &jobs.Options{Wait: true}, func(context.Context) (string, error) {
					t.Error("a waiting duplicate ran although the first succeeded")
					return "", nil
				})
				assert.NoError(t, err)
				saved = v
				waited <- res
			}()
			waitForWaiter(t, d.Pool, "k")
			select {
			case res := <-waited:
				t.Fatalf("the waiter returned %v before the first attempt finished", res.Outcome)
			default:
			}
			close(finish)
			require.NoError(t, testdb.Receive(t, firstDone))
			res = testdb.Receive(t, waited)
			require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
			if mode == "Run" {
				require.Equal(t, "receipt-7", saved, "the saved result reaches the duplicate")
			}
		})
	}
}

func TestWaitingDuplicateRunsAKeyWhoseAttemptFailed(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	running := make(chan struct{})
	finish := make(chan struct{})
	go dd.Run(ctx, "k", nil, func(context.Context) error { close(running); <-finish; return errors.New("x") })
	<-running
	waited := make(chan jobs.Result, 1)
	go func() {
		res, err := dd.Run(ctx, "k", &jobs.Options{Wait: true}, func(context.Context) error { return nil })
		assert.NoError(t, err)
		waited <- res
	}()
	waitForWaiter(t, d.Pool, "k")
	close(finish)
	res := testdb.Receive(t, waited)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 2, res.Attempts)
}

func TestDoReturnsTheSavedResultToDuplicates(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	type receipt struct {
		ID     string
		Amount int
	}
	v, res, err := jobs.Do(ctx, dd, "charge-9", nil, func(context.Context) (receipt, error) {
		return receipt{ID: "ch_1", Amount: 990}, nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, receipt{ID: "ch_1", Amount: 990}, v)

	v, res, err = jobs.Do(ctx, dd, "charge-9", nil, func(context.Context) (receipt, error) {
		t.Error("ran twice")
		return receipt{}, nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, res.Outcome)
	require.Equal(t, receipt{ID: "ch_1", Amount: 990}, v)
	require.JSONEq(t, `{"ID":"ch_1","Amount":990}`, string(res.Saved))

	// A result PostgreSQL cannot hold is reported; the job still counts as done.
	_, _, err = jobs.Do(ctx, dd, "nul", nil, func(context.Context) (string, error) { return "a\x00b", nil })
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	rec, err := dd.Status(ctx, "nul")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusSucceeded, rec.Status)
}

func TestCollectRemovesOnlyExpiredRecords(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	done := func(context.Context) error { return nil }
	for _, key := range []string{"old-1", "old-2", "fresh"} {
		_, err := dd.Run(ctx, key, nil, done)
		require.NoError(t, err)
	}
	running := make(chan struct{})
	finish := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		dd.Run(ctx, "running", nil, func(context.Context) error { close(running); <-finish; return nil })
		close(finished)
	}()
	<-running
	// Retention over for the old ones, and for the running one, whose lease is still live.
	_, err := d.Pool.Exec(ctx, `UPDATE pglock_jobs SET retain_until = clock_timestamp() - interval '1 second'
		WHERE job_key IN ('old-1', 'old-2', 'running')`)
	require.NoError(t, err)

	n, err := dd.Collect(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for key, want := range map[string]bool{"old-1": false, "old-2": false, "fresh": true, "running": true} {
		_, err := dd.Status(ctx, key)
		if want {
			require.NoError(t, err, key)
		} else {
			require.ErrorIs(t, err, pglock.ErrNotFound, key)
		}
	}
	close(finish)
	<-finished
}

func TestForgetLetsTheKeyRunAgain(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	_, err := dd.Run(ctx, "k", nil, func(context.Context) error { return nil })
	require.NoError(t, err)
	first, err := dd.Status(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, dd.Forget(ctx, "k"))
	_, err = dd.Status(ctx, "k")
	require.ErrorIs(t, err, pglock.ErrNotFound)
	require.ErrorIs(t, dd.Forget(ctx, "k"), pglock.ErrNotFound)
	res, err := dd.Run(ctx, "k", nil, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 1, res.Attempts)
	require.Greater(t, res.Token, first.Token, "tokens never repeat, not even after Forget")
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	ok := func(context.Context) error { return nil }
	okTx := func(context.Context, pgx.Tx) error { return nil }
	for _, tc := range []struct {
		name string
		key  string
		opts *jobs.Options
		want error
	}{
		{"empty key", "", nil, pglock.ErrInvalidArgument},
		{"key over 1024 bytes", strings.Repeat("k", 1025), nil, pglock.ErrInvalidArgument},
		{"key not UTF-8", "k\xff", nil, pglock.ErrInvalidArgument},
		{"key with NUL", "k\x00", nil, pglock.ErrInvalidArgument},
		{"negative window", "k", &jobs.Options{Window: -time.Second}, pglock.ErrInvalidArgument},
		{"window over the limit", "k", &jobs.Options{Window: jobs.MaxWindow + time.Hour}, pglock.ErrInvalidArgument},
		{"negative MaxAttempts", "k", &jobs.Options{MaxAttempts: -1}, pglock.ErrInvalidArgument},
		{"TTL too short", "k", &jobs.Options{TTL: 10 * time.Millisecond}, pglock.ErrInvalidTTL},
		{"scope too long", "k", &jobs.Options{Scope: strings.Repeat("s", 256)}, pglock.ErrInvalidArgument},
		{"fingerprint with NUL", "k", &jobs.Options{Fingerprint: "a\x00"}, pglock.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dd.Run(ctx, tc.key, tc.opts, ok)
			require.ErrorIs(t, err, tc.want)
			_, err = dd.RunTx(ctx, tc.key, tc.opts, okTx)
			require.ErrorIs(t, err, tc.want)
			_, _, err = jobs.Do(ctx, dd, tc.key, tc.opts, func(context.Context) (int, error) { return 0, nil })
			require.ErrorIs(t, err, tc.want)
		})
	}
	t.Run("nil fn", func(t *testing.T) {
		_, err := dd.Run(ctx, "k", nil, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		_, err = dd.RunTx(ctx, "k", nil, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		_, _, err = jobs.Do[int](ctx, dd, "k", nil, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	})
	t.Run("nil pool and bad config", func(t *testing.T) {
		_, err := jobs.New(nil, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		_, err = jobs.New(d.Pool, &jobs.Config{AppName: "a\x00"})
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		_, err = jobs.New(d.Pool, &jobs.Config{Scope: "s\xff"})
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	})
	t.Run("status and forget", func(t *testing.T) {
		_, err := dd.Status(ctx, "")
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		require.ErrorIs(t, dd.Forget(ctx, strings.Repeat("k", 1025)), pglock.ErrInvalidArgument)
	})
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pglock_jobs) + (SELECT count(*) FROM pglock_job_waiters)`).Scan(&rows))
	require.Zero(t, rows, "bad input writes nothing")
}

// The SQL contract refuses what the Go side refuses, for callers in other languages.
func TestClaimFunctionRefusesBadArguments(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	for _, tc := range []struct{ name, args, column string }{
		{"empty key", `'', '', 'h', 'i', false, 1000, NULL, 1000, 0, 0`, "p_key"},
		{"key over 1024 bytes", `'', repeat('k', 1025), 'h', 'i', false, 1000, NULL, 1000, 0, 0`, "p_key"},
		{"no TTL outside a transaction", `'', 'k', 'h', 'i', false, NULL, NULL, 1000, 0, 0`, "p_ttl_ms"},
		{"window 0", `'', 'k', 'h', 'i', false, 1000, NULL, 0, 0, 0`, "p_window_ms"},
		{"negative max attempts", `'', 'k', 'h', 'i', false, 1000, NULL, 1000, -1, 0`, "p_max_attempts"},
		{"empty holder", `'', 'k', '', 'i', false, 1000, NULL, 1000, 0, 0`, "p_holder_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Pool.Exec(ctx, fmt.Sprintf(`SELECT pglock_job_claim(%s)`, tc.args))
			want := pglock.ErrInvalidArgument
			if tc.column == "p_ttl_ms" {
				want = pglock.ErrInvalidTTL
			}
			require.ErrorIs(t, db.Translate(err), want)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tc.column, pgErr.ColumnName)
		})
	}
}
