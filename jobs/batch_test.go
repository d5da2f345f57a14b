package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// insertEffects inserts a row per key into effects, in one statement: a batch's effect.
func insertEffects(ctx context.Context, tx pgx.Tx, keys []string) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (key) SELECT unnest($1::text[])`, keys)
	return err
}

// A batch runs fn once with the keys it claimed, in the order given, and commits their outcomes
// with fn's writes; every other key is answered from its record as RunTx answers a duplicate,
// and fn never sees it.
func TestRunTxBatchRunsItsFreshKeysOnceAndAnswersTheOthersFromTheirRecords(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	dd := newDeduper(t, d.Pool, nil)
	ctx := testdb.Context(t)
	opts := &jobs.Options{MaxAttempts: 1}

	_, err := dd.RunTx(ctx, "done", opts, func(ctx context.Context, tx pgx.Tx) error { return insertEffects(ctx, tx, []string{"done"}) })
	require.NoError(t, err)
	_, err = dd.RunTx(ctx, "gave-up", opts, func(context.Context, pgx.Tx) error { return errors.New("boom") })
	require.Error(t, err)
	// "running" is in a RunTx transaction that has not committed, in another instance.
	other := newDeduper(t, d.NewPool(t, nil), nil)
	inFn, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // if the test fails first: its pools close once the transaction ends
	running := make(chan error, 1)
	go func() {
		_, err := other.RunTx(ctx, "running", opts, func(ctx context.Context, tx pgx.Tx) error {
			close(inFn)
			<-release
			return insertEffects(ctx, tx, []string{"running"})
		})
		running <- err
	}()
	testdb.Receive(t, inFn)

	keys := []string{"a", "done", "running", "gave-up", "b"}
	var given [][]string
	delivered, err := dd.RunTxBatch(ctx, keys, opts, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
		given = append(given, claimed)
		return insertEffects(ctx, tx, claimed)
	})
	require.NoError(t, err)
	require.Equal(t, [][]string{{"a", "b"}}, given, "fn runs once, with the keys claimed, in order")
	require.Len(t, delivered, len(keys))
	for i, want := range []jobs.Outcome{jobs.OutcomeRan, jobs.OutcomeAlreadyDone, jobs.OutcomeInProgress, 0, jobs.OutcomeRan} {
		require.Equal(t, keys[i], delivered[i].Key)
		require.Equal(t, want, delivered[i].Outcome, keys[i])
	}
	require.ErrorIs(t, delivered[3].Err, pglock.ErrGaveUp)
	for _, i := range []int{0, 4} {
		rec, err := dd.Status(ctx, keys[i])
		require.NoError(t, err)
		require.Equal(t, jobs.StatusSucceeded, rec.Status)
		require.Equal(t, delivered[i].Token, rec.Token)
		require.Equal(t, delivered[i].FinishedAt, rec.FinishedAt, "the outcome's time is the record's")
		require.Equal(t, 1, rec.Attempts)
		require.Equal(t, 1, effects(t, d.Pool, keys[i]))
	}
	require.Less(t, delivered[0].Token, delivered[4].Token, "tokens in the order of the keys")
	require.Equal(t, 1, effects(t, d.Pool, "done"))

	free()
	require.NoError(t, testdb.Receive(t, running))
	again, err := dd.RunTxBatch(ctx, keys, opts, func(context.Context, pgx.Tx, []string) error {
		t.Error("fn ran for a batch of keys all done or given up")
		return nil
	})
	require.NoError(t, err)
	for i, e := range again {
		if keys[i] == "gave-up" {
			require.ErrorIs(t, e.Err, pglock.ErrGaveUp)
			continue
		}
		require.Equal(t, jobs.OutcomeAlreadyDone, e.Outcome, keys[i])
		require.Equal(t, 1, effects(t, d.Pool, keys[i]))
	}
}

// While fn runs, a batch holds only the keys it claimed: a key it answered OutcomeInProgress,
// whose Run then fails, is taken over by the next delivery at once.
func TestRunTxBatchHoldsOnlyTheKeysItClaimed(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	ctx := testdb.Context(t)
	runner, batcher, other := newDeduper(t, d.NewPool(t, nil), nil), newDeduper(t, d.NewPool(t, nil), nil), newDeduper(t, d.NewPool(t, nil), nil)

	inRun, failRun := make(chan struct{}), make(chan struct{})
	var failOnce sync.Once
	t.Cleanup(func() { failOnce.Do(func() { close(failRun) }) })
	runDone := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, "k", nil, func(context.Context) error {
			close(inRun)
			<-failRun
			return errFailedOnPurpose
		})
		runDone <- err
	}()
	testdb.Receive(t, inRun)

	inBatch, endBatch := make(chan struct{}), make(chan struct{})
	var endOnce sync.Once
	t.Cleanup(func() { endOnce.Do(func() { close(endBatch) }) })
	type batchResult struct {
		delivered []jobs.Delivered
		err       error
	}
	batchDone := make(chan batchResult, 1)
	go func() {
		delivered, err := batcher.RunTxBatch(ctx, []string{"k", "fresh"}, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
			close(inBatch)
			<-endBatch
			return insertEffects(ctx, tx, claimed)
		})
		batchDone <- batchResult{delivered, err}
	}()
	testdb.Receive(t, inBatch)

	failOnce.Do(func() { close(failRun) })
	require.ErrorIs(t, testdb.Receive(t, runDone), errFailedOnPurpose)
	res, err := other.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error { return insertEffects(ctx, tx, []string{"k"}) })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome, "the batch's transaction holds no lock of a key it did not claim")

	endOnce.Do(func() { close(endBatch) })
	b := testdb.Receive(t, batchDone)
	require.NoError(t, b.err)
	require.Equal(t, jobs.OutcomeInProgress, b.delivered[0].Outcome)
	require.Equal(t, jobs.OutcomeRan, b.delivered[1].Outcome)
	require.Equal(t, 1, effects(t, d.Pool, "k"))
	require.Equal(t, 1, effects(t, d.Pool, "fresh"))
}

// A batch whose fn fails (or panics, or leaves its transaction aborted) commits none of its
// writes, and records the failure of every key fn was given: each counts an attempt, and the
// next delivery runs it.
func TestRunTxBatchThatFailsRecordsTheFailureOfEveryKeyItRan(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx, claimed []string) error
		want string // the recorded error
	}{
		{"fn returns an error", func(ctx context.Context, tx pgx.Tx, claimed []string) error {
			if err := insertEffects(ctx, tx, claimed); err != nil {
				return err
			}
			return boom
		}, "boom"},
		{"fn leaves its transaction aborted", func(ctx context.Context, tx pgx.Tx, claimed []string) error {
			insertEffects(ctx, tx, claimed)
			tx.Exec(ctx, `SELECT 1/0`)
			return nil
		}, "aborted"},
		{"fn panics", func(ctx context.Context, tx pgx.Tx, claimed []string) error {
			insertEffects(ctx, tx, claimed)
			panic(boom)
		}, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newEffects(t, d.Pool)
			dd := newDeduper(t, d.Pool, nil)
			ctx := testdb.Context(t)
			keys := []string{"x", "y", "z"}

			func() {
				defer func() {
					if r := recover(); r != nil && r != boom { // a panic goes on, as RunTx's does
						panic(r)
					}
				}()
				_, err := dd.RunTxBatch(ctx, keys, nil, tc.fn)
				require.ErrorContains(t, err, tc.want)
			}()
			for _, key := range keys {
				require.Zero(t, effects(t, d.Pool, key), "the failed batch's writes are rolled back")
				rec, err := dd.Status(ctx, key)
				require.NoError(t, err)
				require.Equal(t, jobs.StatusFailed, rec.Status)
				require.Contains(t, rec.LastError, tc.want)
				require.Equal(t, 1, rec.Attempts)
			}

			delivered, err := dd.RunTxBatch(ctx, keys, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
				require.Equal(t, keys, claimed)
				return insertEffects(ctx, tx, claimed)
			})
			require.NoError(t, err)
			for i, e := range delivered {
				require.Equal(t, jobs.OutcomeRan, e.Outcome)
				require.Equal(t, 2, e.Attempts)
				require.Equal(t, 1, effects(t, d.Pool, keys[i]))
			}
		})
	}
}

// A batch whose backend is killed before COMMIT leaves no writes and no records: its keys'
// next deliveries run them.
func TestRunTxBatchWhoseBackendIsKilledLeavesNoTrace(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	dd := newDeduper(t, d.NewPool(t, nil), nil)
	ctx := testdb.Context(t)
	keys := []string{"p", "q"}
	_, err := dd.RunTxBatch(ctx, keys, &jobs.Options{MaxAttempts: 1}, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
		require.NoError(t, insertEffects(ctx, tx, claimed))
		var killed bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, tx.Conn().PgConn().PID()).Scan(&killed))
		require.True(t, killed)
		return nil
	})
	require.Error(t, err)
	for _, key := range keys {
		require.Zero(t, effects(t, d.Pool, key))
		_, err := dd.Status(ctx, key)
		require.ErrorIs(t, err, pglock.ErrNotFound)
	}
	delivered, err := dd.RunTxBatch(ctx, keys, &jobs.Options{MaxAttempts: 1}, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
		return insertEffects(ctx, tx, claimed)
	})
	require.NoError(t, err)
	for i, e := range delivered {
		require.Equal(t, jobs.OutcomeRan, e.Outcome)
		require.Equal(t, 1, effects(t, d.Pool, keys[i]))
	}
}

// Four instances deliver overlapping batches of one set of keys, with RunTx deliveries of the
// same keys among them, and some batches killed mid-way or failing: every key's effect happens
// exactly once, and its record says which attempt did it.
func TestOverlappingBatchesAcrossInstancesRunEveryKeyExactlyOnce(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	const keyCount, workers, rounds = 120, 8, 30
	dedupers := make([]*jobs.Deduper, 4)
	for i := range dedupers {
		dedupers[i] = newDeduper(t, d.NewPool(t, nil), nil)
	}
	ctx := testdb.Context(t)
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dd := dedupers[w%len(dedupers)]
			effect := insertEffects
			for round := range rounds {
				keys := pickKeys(keyCount, 1+rand.IntN(20))
				var err error
				switch {
				case round%7 == 3: // a single delivery
					_, err = dd.RunTx(ctx, keys[0], nil, func(ctx context.Context, tx pgx.Tx) error { return effect(ctx, tx, keys[:1]) })
				case round%5 == 2: // killed before COMMIT
					// It fails: "the connection ended", or "the outcome is unknown". The end says which.
					dd.RunTxBatch(ctx, keys, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
						if err := effect(ctx, tx, claimed); err != nil {
							return err
						}
						_, err := d.Pool.Exec(ctx, `SELECT pg_terminate_backend($1, 5000)`, tx.Conn().PgConn().PID())
						return err
					})

				case round%5 == 4: // failing
					_, err = dd.RunTxBatch(ctx, keys, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
						effect(ctx, tx, claimed)
						return errFailedOnPurpose
					})
					if errors.Is(err, errFailedOnPurpose) {
						err = nil
					}
				default:
					_, err = dd.RunTxBatch(ctx, keys, nil, effect)
				}
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Whatever the rounds left undone, one last delivery of every key does.
	all := pickKeys(keyCount, keyCount)
	_, err := dedupers[0].RunTxBatch(ctx, all, nil, insertEffects)
	require.NoError(t, err)
	var wrong []string
	rows, err := d.Pool.Query(ctx, `SELECT k, (SELECT count(*) FROM effects e WHERE e.key = k)
		FROM unnest($1::text[]) AS k`, all)
	require.NoError(t, err)
	for rows.Next() {
		var key string
		var n int
		require.NoError(t, rows.Scan(&key, &n))
		if n != 1 {
			wrong = append(wrong, fmt.Sprintf("%s ran %d times", key, n))
		}
	}
	require.NoError(t, rows.Err())
	require.Empty(t, wrong)
	var unfinished int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_jobs WHERE status = 'succeeded' AND finished_at IS NULL`).Scan(&unfinished))
	require.Zero(t, unfinished, "every record committed is finished")
}

var errFailedOnPurpose = errors.New("failed on purpose")

// pickKeys picks n distinct keys of k-0 … k-(count-1), in a random order.
func pickKeys(count, n int) []string {
	keys := make([]string, 0, n)
	for _, i := range rand.Perm(count)[:n] {
		keys = append(keys, fmt.Sprintf("k-%d", i))
	}
	return keys
}

func TestRunTxBatchRefusesBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := testdb.Context(t)
	fn := func(context.Context, pgx.Tx, []string) error {
		t.Error("fn ran for bad input")
		return nil
	}
	tooMany := make([]string, jobs.MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		name string
		keys []string
		opts *jobs.Options
		fn   func(context.Context, pgx.Tx, []string) error
	}{
		{"no keys", nil, nil, fn},
		{"more than MaxBatch", tooMany, nil, fn},
		{"a key twice", []string{"a", "b", "a"}, nil, fn},
		{"an empty key", []string{"a", ""}, nil, fn},
		{"a key over 1024 bytes", []string{"a", strings.Repeat("k", 1025)}, nil, fn},
		{"Wait", []string{"a"}, &jobs.Options{Wait: true}, fn},
		{"a fingerprint", []string{"a"}, &jobs.Options{Fingerprint: "f"}, fn},
		{"a window over the limit", []string{"a"}, &jobs.Options{Window: jobs.MaxWindow * 2}, fn},
		{"nil fn", []string{"a"}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delivered, err := dd.RunTxBatch(ctx, tc.keys, tc.opts, tc.fn)
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			require.Nil(t, delivered)
		})
	}
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_jobs`).Scan(&rows))
	require.Zero(t, rows, "bad input writes nothing")
}

// The SQL contract refuses a bad batch as the Go side does, with SQLSTATE 22023 naming the
// argument, for callers in other languages.
func TestClaimManyAndFinishManyRefuseBadArguments(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	for _, tc := range []struct{ name, call, column string }{
		{"no keys", `pglock_job_claim_many('', ARRAY[]::text[], 'h', 'i', 1000, 0, 0)`, "p_keys"},
		{"null keys", `pglock_job_claim_many('', NULL, 'h', 'i', 1000, 0, 0)`, "p_keys"},
		{"over 1000 keys", `pglock_job_claim_many('', (SELECT array_agg(g::text) FROM generate_series(1, 1001) g), 'h', 'i', 1000, 0, 0)`, "p_keys"},
		{"a key twice", `pglock_job_claim_many('', ARRAY['a', 'b', 'a'], 'h', 'i', 1000, 0, 0)`, "p_keys"},
		{"an empty key after good ones", `pglock_job_claim_many('', ARRAY['a', 'b', ''], 'h', 'i', 1000, 0, 0)`, "p_key"},
		{"a null key", `pglock_job_claim_many('', ARRAY['a', NULL], 'h', 'i', 1000, 0, 0)`, "p_key"},
		{"an empty holder", `pglock_job_claim_many('', ARRAY['a'], '', 'i', 1000, 0, 0)`, "p_holder_id"},
		{"window 0", `pglock_job_claim_many('', ARRAY['a'], 'h', 'i', 0, 0, 0)`, "p_window_ms"},
		{"negative max attempts", `pglock_job_claim_many('', ARRAY['a'], 'h', 'i', 1000, -1, 0)`, "p_max_attempts"},
		{"negative idle timeout", `pglock_job_claim_many('', ARRAY['a'], 'h', 'i', 1000, 0, -1)`, "p_idle_timeout_ms"},
		{"finish: a token short", `pglock_job_finish_many('', ARRAY['a', 'b'], ARRAY[1]::bigint[], 1000)`, "p_fencing_tokens"},
		{"finish: a null token", `pglock_job_finish_many('', ARRAY['a'], ARRAY[NULL]::bigint[], 1000)`, "p_fencing_tokens"},
		{"finish: a key twice", `pglock_job_finish_many('', ARRAY['a', 'a'], ARRAY[1, 2]::bigint[], 1000)`, "p_keys"},
		{"finish: a null key", `pglock_job_finish_many('', ARRAY['a', NULL], ARRAY[1, 2]::bigint[], 1000)`, "p_keys"},
		{"finish: window 0", `pglock_job_finish_many('', ARRAY['a'], ARRAY[1]::bigint[], 0)`, "p_window_ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := d.Pool.Exec(ctx, "SELECT "+tc.call)
			require.ErrorIs(t, db.Translate(err), pglock.ErrInvalidArgument)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tc.column, pgErr.ColumnName)
		})
	}
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_jobs`).Scan(&rows))
	require.Zero(t, rows)
}
