package advisory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

// Each of a session's four forms of try and unlock (a bigint key or a pair, exclusive or
// shared; a statement each) takes and frees the lock PostgreSQL keeps for that key and mode.
func TestTryAndUnlockTakeAndFreeTheLockOfTheirKeyAndMode(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	s := open(t, pool, nil)
	ctx := context.Background()
	for _, tt := range []struct {
		key    advisory.Key
		shared bool
		want   string // classid objid objsubid mode, as pg_locks shows it
	}{
		{advisory.Int64Key(7<<32 | 9), false, "7 9 1 ExclusiveLock"},
		{advisory.Int64Key(7<<32 | 9), true, "7 9 1 ShareLock"},
		{advisory.PairKey(7, 9), false, "7 9 2 ExclusiveLock"},
		{advisory.PairKey(7, 9), true, "7 9 2 ShareLock"},
	} {
		try, unlock := s.TryLock, s.Unlock
		if tt.shared {
			try, unlock = s.TryRLock, s.RUnlock
		}
		require.NoError(t, try(ctx, tt.key))
		var held []string
		rows, err := pool.Query(ctx, `SELECT classid || ' ' || objid || ' ' || objsubid || ' ' || mode FROM pg_locks
			WHERE locktype = 'advisory' AND pid = $1`, s.PID())
		require.NoError(t, err)
		for rows.Next() {
			var lock string
			require.NoError(t, rows.Scan(&lock))
			held = append(held, lock)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{tt.want}, held, fmt.Sprint(tt.key, " shared=", tt.shared))
		require.NoError(t, unlock(ctx, tt.key))
		require.Empty(t, advisoryLocks(t, pool), fmt.Sprint(tt.key, " shared=", tt.shared))
	}
}
