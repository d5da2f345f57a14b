package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

// A transaction lock's holder writes and then stops talking: its connection is frozen, the
// transaction open. With XactOptions.IdleTimeout, PostgreSQL ends the session once it has been
// idle that long: the next WithXactLock proceeds then, and when the holder comes back, its
// commit fails and its write is gone.
func TestVanishedXactHolderIsEndedAfterItsIdleTimeout(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, "CREATE TABLE writes (who text NOT NULL, at timestamptz NOT NULL)")
	require.NoError(t, err)
	pool, partition := d.PartitionablePool(t, nil)
	key := advisory.StringKey("vanishing")
	const idle = 500 * time.Millisecond

	type written struct {
		at   time.Time // the database's time of the holder's last statement
		idle string    // the holder's transaction's idle_in_transaction_session_timeout
	}
	wrote := make(chan written, 1)
	comeBack := make(chan struct{})
	held := make(chan error, 1)
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		held <- advisory.WithXactLock(ctx, pool, key, &advisory.XactOptions{IdleTimeout: idle}, func(ctx context.Context, tx pgx.Tx) error {
			var w written
			err := tx.QueryRow(ctx, "INSERT INTO writes VALUES ('vanished holder', clock_timestamp()) RETURNING at, current_setting('idle_in_transaction_session_timeout')").Scan(&w.at, &w.idle)
			wrote <- w
			<-comeBack
			return err // nil: WithXactLock commits
		})
	}()
	t.Cleanup(func() { // before the proxy stops and the pool closes, which waits for its connection
		select {
		case <-comeBack:
		default:
			close(comeBack)
		}
		<-holderDone
	})
	last := testdb.Receive(t, wrote)
	require.Equal(t, "500ms", last.idle, "what ends the vanished holder's session")
	heal := partition()

	waitCtx, cancel := context.WithTimeout(ctx, 12*time.Second)
	defer cancel()
	var lockedAt time.Time
	err = advisory.WithXactLock(waitCtx, d.Pool, key, nil, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&lockedAt)
	})
	// Within seconds (waitCtx), by the idle timeout checked above, not when TCP gives up: how
	// soon after it is the machine's to say, and not asserted.
	require.NoError(t, err, "the vanished holder's session was ended")
	require.True(t, lockedAt.After(last.at.Add(idle)), "locked at %s, last statement %s", lockedAt, last.at)

	heal()
	close(comeBack)
	require.Error(t, testdb.Receive(t, held), "the holder's commit comes too late")
	var writes int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT count(*) FROM writes").Scan(&writes))
	require.Zero(t, writes, "the vanished holder's write never commits")
}
