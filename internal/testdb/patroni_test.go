package testdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

// The harness is what users run: a multi-host connection string reaches the primary, and once
// the primary's postmaster is killed the other node is promoted (on a new timeline) and the same
// string reaches it. It runs from a working directory the nodes' user cannot enter, as from a
// checkout under mktemp -d.
func TestPatroniFailsOverWhenThePrimarysPostmasterIsKilled(t *testing.T) {
	chdirPrivate(t)
	ctx := context.Background()
	p := testdb.NewPatroni(t, nil)
	primary, err := p.Primary()
	require.NoError(t, err)
	require.Equal(t, 0, primary)

	timeline := func() int64 {
		conn, err := pgx.Connect(ctx, p.URL("postgres"))
		require.NoError(t, err, p.Log())
		defer conn.Close(ctx)
		var tl int64
		require.NoError(t, conn.QueryRow(ctx, `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint`).Scan(&tl))
		return tl
	}
	require.Equal(t, int64(1), timeline())
	killed := time.Now()
	require.NoError(t, p.KillPostmaster(0))
	require.NoError(t, p.WaitPrimary(ctx, 1), p.Log())
	t.Logf("node 1 promoted %s after the kill", time.Since(killed).Round(time.Millisecond))
	testdb.WaitFor(t, func() bool {
		conn, err := pgx.Connect(ctx, p.URL("postgres"))
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	}, "the connection string reaches the new primary")
	require.Equal(t, int64(2), timeline())
}
