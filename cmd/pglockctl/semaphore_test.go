package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// pglockctl list shows a semaphore's holders, one row each.
func TestListShowsSemaphoreHolders(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l, err := tablelock.New(d.Pool, &tablelock.Config{AppName: "ctl-test"})
	require.NoError(t, err)
	defer l.Close(ctx)
	for range 2 {
		_, err := l.TryAcquireSemaphore(ctx, "partner-api", 3, nil)
		require.NoError(t, err)
	}
	out, stderr, code := pglockctl(t, ctx, d.URL(), "list", "--kind", "table", "--name", "pglock.semaphore/partner-api/*")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, 2, strings.Count(out, "pglock.semaphore/partner-api/"), out)
}
