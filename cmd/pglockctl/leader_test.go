package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
)

// elect runs a candidate in election name until the test ends; terms receives each term it
// is elected in, and ended why each ended.
func elect(t *testing.T, pool *pgxpool.Pool, name string, terms chan<- int64, ended chan<- error) {
	t.Helper()
	e, err := leader.New(pool, name, &leader.Config{AppName: "ctl-test", TTL: 3 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
			terms <- term
			<-ctx.Done()
			select {
			case ended <- context.Cause(ctx):
			default:
			}
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func TestLeaderListAndResign(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	terms := make(chan int64, 4)
	ended := make(chan error, 1)
	elect(t, d.NewPool(t, nil), "reconciler", terms, ended)
	first := testdb.Receive(t, terms)
	elect(t, d.NewPool(t, nil), "reconciler", terms, make(chan error))
	testdb.WaitFor(t, func() bool {
		l, err := leader.Current(ctx, d.Pool, "reconciler")
		return err == nil && l.Candidates == 1
	})

	out, stderr, code := pglockctl(t, ctx, d.URL(), "leader", "list")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^ELECTION\s+LEADER\s+INSTANCE\s+TERM\s+SINCE\s+EXPIRES\s+CANDIDATES$`, lines[0])
	require.Regexp(t, `^reconciler\s+[0-9a-f]{32}\s+ctl-test@\S+\s+`+itoa(first)+`\s+.*\s+1$`, lines[1])

	out, _, code = pglockctl(t, ctx, d.URL(), "-o", "json", "leader", "list")
	require.Equal(t, exitOK, code)
	var listed struct {
		Now       time.Time        `json:"now"`
		Elections []map[string]any `json:"elections"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Elections, 1)
	for _, field := range []string{"election", "leader", "instance", "term", "since", "expires_at", "expires_in_ms", "candidates"} {
		require.Contains(t, listed.Elections[0], field)
	}
	require.EqualValues(t, first, listed.Elections[0]["term"])

	out, stderr, code = pglockctl(t, ctx, d.URL(), "leader", "resign", "reconciler")
	require.Equal(t, exitFailure, code, "without --force nothing is done")
	require.Contains(t, out, "would depose the leader of \"reconciler\"")
	require.Contains(t, stderr, "--force")

	out, stderr, code = pglockctl(t, ctx, d.URL(), "leader", "resign", "reconciler", "--force")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, "deposed the leader of \"reconciler\"")
	require.Greater(t, testdb.Receive(t, terms), first, "the next term is higher")
	require.ErrorIs(t, testdb.Receive(t, ended), pglock.ErrLockLost, "the deposed leader is told")

	_, stderr, code = pglockctl(t, ctx, d.URL(), "leader", "resign", "nobody", "--force")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no leader")
	_, _, code = pglockctl(t, ctx, d.URL(), "leader", "resign", "", "--force")
	require.Equal(t, exitUsage, code, "a name no election may have")
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
