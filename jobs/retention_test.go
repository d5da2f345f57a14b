package jobs_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// waitForWaiter returns once a delivery of key waits for its outcome (registered in the
// database), so that what a test does next happens while it waits.
func waitForWaiter(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pglock_job_waiters WHERE job_key = $1`, key).Scan(&n))
		return n > 0
	}, "a delivery of %q waits", key)
}

// expireRecord ends the retention of key's record now, as if its window had passed.
func expireRecord(t *testing.T, pool *pgxpool.Pool, key string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `UPDATE pglock_jobs SET retain_until = clock_timestamp() - interval '1 ms' WHERE job_key = $1`, key)
	require.NoError(t, err)
}

func runtimeGoexit() { runtime.Goexit() }

func TestALiveLeaseOutlastsTheRecordsWindow(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	running := make(chan struct{})
	finish := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := dd.Run(ctx, "k", nil, func(context.Context) error { close(running); <-finish; return nil })
		done <- err
	}()
	<-running
	expireRecord(t, d.Pool, "k")

	res, err := dd.Run(ctx, "k", nil, func(context.Context) error {
		t.Error("a second delivery ran while the first attempt's lease was live")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeInProgress, res.Outcome)
	n, err := dd.Collect(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "Collect keeps a record under a live lease")
	close(finish)
	require.NoError(t, testdb.Receive(t, done))
}

func TestRunTxThatOutlastsItsWindowStillAnswersDuplicates(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	res, err := dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
		// fn ran longer than the window: by now the claim's retention has passed.
		_, err := tx.Exec(ctx, `UPDATE pglock_jobs SET retain_until = clock_timestamp() - interval '1 ms' WHERE job_key = 'k'`)
		return err
	})
	require.NoError(t, err)
	require.True(t, res.FinishedAt.After(res.StartedAt), "the finish time is the commit's, not the claim's")

	dup, err := dd.RunTx(ctx, "k", nil, func(context.Context, pgx.Tx) error {
		t.Error("a duplicate ran after the first delivery committed")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, dup.Outcome, "the window counts from the outcome")
	rec, err := dd.Status(ctx, "k")
	require.NoError(t, err)
	require.True(t, rec.RetainUntil.After(rec.FinishedAt))
}

func TestCrashedRunAttemptsCountTowardsMaxAttempts(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	// A runner claimed the key and vanished: its lease has expired.
	_, err := d.Pool.Exec(ctx, `SELECT pglock_job_claim('', 'k', 'vanished', 'i', false, 1000, NULL, 60000, 0, 0)`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `UPDATE pglock_jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'`)
	require.NoError(t, err)

	_, err = dd.Run(ctx, "k", &jobs.Options{MaxAttempts: 1}, func(context.Context) error {
		t.Error("ran after MaxAttempts crashed attempts")
		return nil
	})
	require.ErrorIs(t, err, pglock.ErrGaveUp)
	require.ErrorContains(t, err, "vanished")

	res, err := dd.Run(ctx, "k", &jobs.Options{MaxAttempts: 2}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	require.Equal(t, 2, res.Attempts)
}

func TestRunTxRefusedAtCommitIsRecordedAsAFailure(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE ledger (entry text CONSTRAINT one_entry UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
	require.NoError(t, err)
	insertTwice := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ('a'), ('a')`) // checked at COMMIT
		return err
	}
	res, err := dd.RunTx(ctx, "k", nil, insertTwice)
	require.ErrorContains(t, err, "one_entry")
	require.NotContains(t, err.Error(), "unknown", "a COMMIT the server refused did not happen")
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	rec, err := dd.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusFailed, rec.Status)
	require.Equal(t, 1, rec.Attempts)
	require.Contains(t, rec.LastError, "one_entry")

	_, err = dd.RunTx(ctx, "k", &jobs.Options{MaxAttempts: 1}, insertTwice)
	require.ErrorIs(t, err, pglock.ErrGaveUp)
}

func TestRunTxReturnsWhenItsConnectionFreezes(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool, partition := d.PartitionablePool(t, nil)
	dd := newDeduper(t, pool, &jobs.Config{TxIdleTimeout: time.Second})
	// A context that never ends: only RunTx's own bound on its rollback can make it return
	// within Receive's wait.
	ctx := context.Background()
	returned := make(chan error, 1)
	var heal func()
	go func() {
		_, err := dd.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
			heal = partition()
			return errors.New("gave up on the partner")
		})
		returned <- err
	}()
	// Receive fails the test if RunTx waits for the partition to heal.
	require.ErrorContains(t, testdb.Receive(t, returned), "gave up on the partner")
	heal()
}

func TestFnThatEndsItsGoroutineCountsAsAFailure(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	dd := newDeduper(t, d.Pool, nil)
	ctx := context.Background()
	for _, mode := range []string{"Run", "RunTx"} {
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			if mode == "Run" {
				dd.Run(ctx, mode, nil, func(context.Context) error { runtimeGoexit(); return nil })
			} else {
				dd.RunTx(ctx, mode, nil, func(context.Context, pgx.Tx) error { runtimeGoexit(); return nil })
			}
		}()
		<-ended
		rec, err := dd.Status(ctx, mode)
		require.NoError(t, err, mode)
		require.Equal(t, jobs.StatusFailed, rec.Status, mode)
		require.Contains(t, rec.LastError, "Goexit", mode)
	}
}
