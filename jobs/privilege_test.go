package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// The grants docs/sql.md lists are all a Deduper needs: it claims, runs, renews, fails, waits,
// delivers batches, forgets and collects as a role that cannot write the tables.
func TestDeduperWorksWithTheLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	newEffects(t, d.Pool)
	role := d.NewRole(t, "pglock_app")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s;
		GRANT SELECT ON pglock_jobs TO %[1]s;
		GRANT INSERT, SELECT ON effects TO %[1]s;
		GRANT EXECUTE ON FUNCTION
			pglock_job_claim_in_mode(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint, text, bigint),
			pglock_job_fence(varchar, text, bigint, bigint), pglock_job_renew(varchar, text, bigint, bigint),
			pglock_job_renew_many(varchar[], text[], bigint[], bigint[]), pglock_job_running(varchar, text),
			pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint),
			pglock_job_finish_tx(varchar, text, bigint, bigint),
			pglock_job_claim_many(varchar, text[], varchar, varchar, bigint, integer, bigint),
			pglock_job_finish_many(varchar, text[], bigint[], bigint),
			pglock_job_await(varchar, text, varchar, bigint), pglock_job_unawait(varchar, text, varchar),
			pglock_job_forget(varchar, text), pglock_job_collect(integer),
			pglock_job_debounce(varchar, text, jsonb, bigint, bigint), pglock_job_debounce_claim(varchar, varchar, bigint, integer),
			pglock_job_debounce_next(varchar), pglock_job_debounce_renew_many(varchar[], text[], bigint[], bigint[]),
			pglock_job_debounce_finish(varchar, text, bigint), pglock_job_debounce_fail(varchar, text, bigint, text, bigint) TO %[1]s;`, role))
	require.NoError(t, err)
	var (
		failed  testdb.FailureCounter
		queries testdb.QueryCounter
	)
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET ROLE "+role)
			return err
		}
		c.ConnConfig.Tracer = &multitracer.Tracer{QueryTracers: []pgx.QueryTracer{&failed, &queries}}
	})
	dd := newDeduper(t, pool, nil)

	_, err = dd.RunTx(ctx, "tx", nil, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('tx')`)
		return err
	})
	require.NoError(t, err)
	_, err = dd.RunTx(ctx, "tx-failed", nil, func(context.Context, pgx.Tx) error { return errors.New("x") })
	require.ErrorContains(t, err, "x")
	rec, err := dd.Status(ctx, "tx-failed")
	require.NoError(t, err)
	require.Equal(t, jobs.StatusFailed, rec.Status)
	delivered, err := dd.RunTxBatch(ctx, []string{"tx", "batch-1", "batch-2"}, nil, func(ctx context.Context, tx pgx.Tx, claimed []string) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) SELECT unnest($1::text[])`, claimed)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeAlreadyDone, delivered[0].Outcome)
	require.Equal(t, jobs.OutcomeRan, delivered[2].Outcome)

	running := make(chan struct{})
	finish := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		_, err := dd.Run(ctx, "run", &jobs.Options{TTL: 3 * time.Second}, func(ctx context.Context) error {
			close(running)
			<-finish
			// Until the role has renewed the lease (a third of the TTL in), or it was lost.
			return testdb.Moved(ctx, d.Pool, `SELECT lease_expires_at FROM pglock_jobs WHERE job_key = 'run'`)
		})
		ran <- err
	}()
	<-running
	waited := make(chan jobs.Result, 1)
	go func() {
		res, err := dd.Run(ctx, "run", &jobs.Options{Wait: true}, func(context.Context) error { return nil })
		assert.NoError(t, err)
		waited <- res
	}()
	waitForWaiter(t, d.Pool, "run")
	close(finish)
	require.NoError(t, testdb.Receive(t, ran), "its lease was renewed")
	require.Equal(t, jobs.OutcomeAlreadyDone, testdb.Receive(t, waited).Outcome)

	// A Supersede attempt that fences its writes, superseded by another; a debounced key, run.
	superseding, superseded := make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := dd.Run(ctx, "sync", &jobs.Options{Mode: jobs.Supersede}, func(ctx context.Context) error {
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return jobs.Fence(ctx, tx) }); err != nil {
				return err
			}
			close(superseding)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		superseded <- err
	}()
	testdb.Receive(t, superseding)
	_, err = dd.Run(ctx, "sync", &jobs.Options{Mode: jobs.Supersede}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.ErrorIs(t, testdb.Receive(t, superseded), pglock.ErrSuperseded)
	_, err = dd.Debounce(ctx, "digest", 1, jobs.DebounceOptions{Quiet: time.Millisecond, MaxWait: time.Second})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	debounced, runnerDone := make(chan jobs.DebouncedRun, 1), make(chan error, 1)
	go func() {
		runnerDone <- dd.RunDebounced(runCtx, nil, func(_ context.Context, _ pgx.Tx, run jobs.DebouncedRun) error { debounced <- run; return nil })
	}()
	require.Equal(t, "digest", testdb.Receive(t, debounced).Key)
	// The run finished and the runner looked for the next key, each statement as the role.
	testdb.WaitFor(t, func() bool {
		var left bool
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pglock_job_debounces)`).Scan(&left))
		return !left && queries.ByName()["NextDebounced"] > 0
	}, "the debounced run finished and the runner slept")
	stop()
	require.NoError(t, testdb.Receive(t, runnerDone))

	require.NoError(t, dd.Forget(ctx, "run"))
	_, err = dd.Collect(ctx)
	require.NoError(t, err)
	refused, why := failed.Count()
	require.Zero(t, refused, "no statement was refused: %s", why)
}
