package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// A RunTx worker that stops talking mid-transaction (a frozen VM, a silent partition) keeps its
// key in progress until PostgreSQL ends its idle session: Config.TxIdleTimeout after its last
// statement, not the hours TCP would take. A waiting duplicate then runs the key (within that
// bound plus one poll on an idle machine), and the frozen transaction's writes never commit.
func TestFrozenRunTxWorkerHoldsItsKeyNoLongerThanTxIdleTimeout(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	pool, partition := d.PartitionablePool(t, nil)
	const idle = time.Second
	frozen := newDeduper(t, pool, &jobs.Config{TxIdleTimeout: idle})
	other := newDeduper(t, d.Pool, nil)
	ctx := context.Background()

	frozenDone := make(chan error, 1)
	froze := make(chan func(), 1)
	go func() {
		_, err := frozen.RunTx(ctx, "k", nil, func(ctx context.Context, tx pgx.Tx) error {
			var idleTimeout string
			err := tx.QueryRow(ctx, `INSERT INTO effects (key) VALUES ('by the frozen worker') RETURNING current_setting('idle_in_transaction_session_timeout')`).Scan(&idleTimeout)
			assert.NoError(t, err)
			assert.Equal(t, "1s", idleTimeout, "what ends the frozen worker's session")
			froze <- partition()
			return nil
		})
		frozenDone <- err
	}()
	heal := testdb.Receive(t, froze)

	res, err := other.RunTx(ctx, "k", nil, func(context.Context, pgx.Tx) error {
		t.Error("ran while the frozen worker's transaction was alive")
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, jobs.OutcomeInProgress, res.Outcome)

	// Within seconds, by the idle timeout checked above, not when TCP gives up: how soon (the
	// documented bound is the idle timeout and one poll) is logged, not asserted.
	start := time.Now()
	res, err = other.RunTx(testdb.Context(t), "k", &jobs.Options{Wait: true}, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ('by the next delivery')`)
		return err
	})
	require.NoError(t, err, "the duplicate proceeds once the frozen session is ended")
	require.Equal(t, jobs.OutcomeRan, res.Outcome)
	t.Logf("the duplicate ran %s after it began waiting (TxIdleTimeout %s)", time.Since(start).Round(time.Millisecond), idle)

	heal()
	require.Error(t, testdb.Receive(t, frozenDone), "the frozen worker learns its outcome is not recorded")
	require.Zero(t, effects(t, d.Pool, "by the frozen worker"), "the frozen transaction's write never commits")
	require.Equal(t, 1, effects(t, d.Pool, "by the next delivery"))
}
