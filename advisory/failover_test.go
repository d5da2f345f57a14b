package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// An advisory lock lives in the server's memory: it cannot survive a failover. Under Patroni,
// once the primary's postmaster is killed the Session's Lost() closes, and a new Session through
// the same multi-host pool takes the lock on the promoted standby.
func TestASessionIsLostInAFailoverAndTheLockTakenAgainOnTheNewPrimary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testdb.NewPatroni(t, nil)
	pool, err := pgxpool.New(ctx, p.URL("postgres"))
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, migrations.Up(ctx, pool))
	key := advisory.StringKey("nightly-report")

	s, err := advisory.Open(ctx, pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, key))
	require.NoError(t, p.KillPostmaster(0))
	testdb.Receive(t, s.Lost())
	require.ErrorIs(t, s.Err(), pglock.ErrLockLost)
	s.Close(ctx)

	require.NoError(t, p.WaitPrimary(ctx, 1), p.Log())
	var again *advisory.Session
	testdb.WaitFor(t, func() bool {
		again, err = advisory.Open(ctx, pool, nil)
		return err == nil
	}, "a session opens on the new primary")
	defer again.Close(ctx)
	require.NoError(t, again.TryLock(ctx, key), "the lock is free there: nothing carried it over")
}
