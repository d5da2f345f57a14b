package testdb_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

// chdirPrivate runs the test from a directory that only this user may enter, as a test binary
// of a checkout under mktemp -d or root's home runs: the servers the harness starts as the
// postgres user must not depend on it.
func chdirPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkout") // t.TempDir is 0700
	require.NoError(t, os.Mkdir(dir, 0o700))
	t.Chdir(dir)
}

// requireRoot: the harness runs servers as another user only when this process is root.
func requireRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("testdb: this test needs root, which runs the servers as the postgres user")
	}
	t.Skip("testdb: this test needs root, which runs the servers as the postgres user")
}

// Every program of the cluster harness (initdb, postgres, pg_basebackup, pg_ctl) works from a
// working directory its user cannot enter. (They passed before the harness gave them a directory
// of their own, as they change to theirs; Patroni's test is the one that failed.)
func TestAClusterStartsFromACheckoutItsUserCannotEnter(t *testing.T) {
	requireRoot(t)
	chdirPrivate(t)
	ctx := context.Background()
	primary, err := testdb.StartCluster(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { primary.Remove() })
	standby, err := primary.Standby(ctx, primary.Port())
	require.NoError(t, err)
	t.Cleanup(func() { standby.Remove() })
	require.NoError(t, standby.Promote(ctx), standby.Log())

	conn, err := pgx.Connect(ctx, standby.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var inRecovery bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.False(t, inRecovery, "the promoted standby accepts writes")
}

// A server's directory its user cannot reach (TMPDIR under a 0700 directory) fails the start
// at once, with a message naming the directory, instead of a server that waits for its files
// until a timeout.
func TestAServerDirectoryItsUserCannotReachFailsAtOnce(t *testing.T) {
	requireRoot(t)
	tmp := t.TempDir() // under a 0700 directory of the test's: only this user may enter it
	t.Setenv("TMPDIR", tmp)
	ctx := context.Background()

	_, err := testdb.StartCluster(ctx)
	require.ErrorContains(t, err, "cannot enter "+filepath.Dir(tmp))
	_, err = testdb.StartPatroni(ctx, nil)
	if errors.Is(err, exec.ErrNotFound) && os.Getenv("CI") != "true" {
		t.Log("testdb: Patroni is not installed: its part of this test did not run")
	} else {
		require.ErrorContains(t, err, "cannot enter "+filepath.Dir(tmp))
	}
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "a failed start leaves nothing behind")
}
