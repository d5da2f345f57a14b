package databasesql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

// A transaction-level advisory lock taken through database/sql is held until its transaction
// commits, rolls back or loses its backend, and no longer.
func TestXactLockSQLIsHeldUntilTheTransactionEnds(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, d *testdb.DB, sqlDB *sql.DB) {
		ctx := context.Background()
		key := advisory.StringKey("nightly-report")
		heldElsewhere := func() bool {
			t.Helper()
			tx, err := sqlDB.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback()
			err = advisory.TryXactLockSQL(ctx, tx, key)
			if err != nil {
				require.ErrorIs(t, err, pglock.ErrLocked)
			}
			return err != nil
		}
		for _, end := range []string{"commit", "rollback", "killed backend"} {
			tx, err := sqlDB.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, advisory.XactLockSQL(ctx, tx, key))
			require.True(t, heldElsewhere(), "held until %s", end)
			switch end {
			case "commit":
				require.NoError(t, tx.Commit())
			case "rollback":
				require.NoError(t, tx.Rollback())
			default:
				kill(t, ctx, d, backendOf(t, ctx, tx))
				require.Error(t, tx.Commit())
			}
			require.False(t, heldElsewhere(), "free after %s", end)
		}

		// Shared locks share; an exclusive one waits for them, bounded by ctx.
		shared := make([]*sql.Tx, 2)
		for i := range shared {
			var err error
			shared[i], err = sqlDB.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, advisory.RXactLockSQL(ctx, shared[i], key))
		}
		tx, err := sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, advisory.TryRXactLockSQL(ctx, tx, key))
		require.NoError(t, tx.Rollback())
		tx, err = sqlDB.BeginTx(ctx, nil)
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, advisory.XactLockSQL(waitCtx, tx, key), pglock.ErrLockTimeout)
		tx.Rollback()
		for _, s := range shared {
			require.NoError(t, s.Commit())
		}
		// pgx gives up a wait its ctx ended by closing the connection, and the server ends the
		// wait once it notices: soon, not at once.
		testdb.WaitFor(t, func() bool { return !heldElsewhere() })
	})
}
