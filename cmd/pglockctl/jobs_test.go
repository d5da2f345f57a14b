package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// seedJobs records order-1 (succeeded, with a result), order-2 (failed) and refund-1 (succeeded,
// in scope "refunds").
func seedJobs(t *testing.T, d *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	dd, err := jobs.New(d.Pool, &jobs.Config{AppName: "seed"})
	require.NoError(t, err)
	_, _, err = jobs.Do(ctx, dd, "order-1", nil, func(context.Context) (string, error) { return "receipt-1", nil })
	require.NoError(t, err)
	_, err = dd.Run(ctx, "order-2", nil, func(context.Context) error { return errors.New("card declined\nby issuer") })
	require.Error(t, err)
	_, err = dd.Run(ctx, "refund-1", &jobs.Options{Scope: "refunds"}, func(context.Context) error { return nil })
	require.NoError(t, err)
}

func TestJobsListFiltersByStatusKeyAndScope(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	seedJobs(t, d)
	ctx := context.Background()

	out, stderr, code := pglockctl(t, ctx, d.URL(), "jobs", "list")
	require.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out)
	require.Regexp(t, `^SCOPE\s+KEY\s+STATUS\s+ATTEMPTS`, lines[0])
	require.Regexp(t, `^-\s+order-1\s+succeeded\s+1\s`, lines[1])
	require.Regexp(t, `^-\s+order-2\s+failed\s+1\s.*card declined by issuer$`, lines[2], "errors on one line")
	require.Regexp(t, `^refunds\s+refund-1\s+succeeded`, lines[3])

	out, _, code = pglockctl(t, ctx, d.URL(), "jobs", "list", "--status", "failed")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "order-2")
	require.NotContains(t, out, "order-1")

	out, _, code = pglockctl(t, ctx, d.URL(), "-o", "json", "jobs", "list", "--key", "order-?")
	require.Equal(t, exitOK, code)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	require.Equal(t, "order-1", listed[0]["key"])
	require.Equal(t, "receipt-1", listed[0]["result"], "the saved result, as JSON")
	for _, field := range []string{"scope", "key", "status", "holder", "instance", "attempts", "token", "lease_expires_at",
		"started_at", "finished_at", "last_error", "result", "fingerprint", "retain_until", "created_at"} {
		require.Contains(t, listed[0], field)
	}

	out, _, code = pglockctl(t, ctx, d.URL(), "jobs", "list", "--scope", "refunds")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "refund-1")
	require.NotContains(t, out, "order-1")

	out, _, code = pglockctl(t, ctx, d.URL(), "jobs", "list", "--key", "100%")
	require.Equal(t, exitOK, code, "LIKE's wildcards in a pattern are literal")
	require.Equal(t, 1, strings.Count(out, "\n"), out)

	_, stderr, code = pglockctl(t, ctx, d.URL(), "jobs", "list", "--status", "done")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "running, succeeded or failed")
}

func TestJobsShowAndForget(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	seedJobs(t, d)
	ctx := context.Background()

	out, stderr, code := pglockctl(t, ctx, d.URL(), "jobs", "show", "order-2")
	require.Equal(t, exitOK, code, stderr)
	require.Regexp(t, `(?m)^status\s+failed$`, out)
	require.Regexp(t, `(?m)^last error\s+card declined`, out)

	_, stderr, code = pglockctl(t, ctx, d.URL(), "jobs", "show", "order-9")
	require.Equal(t, exitFailure, code)
	require.Contains(t, stderr, "no record")

	out, stderr, code = pglockctl(t, ctx, d.URL(), "jobs", "forget", "order-1")
	require.Equal(t, exitFailure, code, "without --force nothing is done")
	require.Contains(t, out, `would forget "order-1" (succeeded, 1 attempts`)
	require.Contains(t, stderr, "--force")
	_, _, code = pglockctl(t, ctx, d.URL(), "jobs", "show", "order-1")
	require.Equal(t, exitOK, code, "the record is still there")

	out, stderr, code = pglockctl(t, ctx, d.URL(), "jobs", "forget", "order-1", "--force")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, out, `forgot "order-1"`)
	_, _, code = pglockctl(t, ctx, d.URL(), "jobs", "show", "order-1")
	require.Equal(t, exitFailure, code)

	out, _, code = pglockctl(t, ctx, d.URL(), "jobs", "forget", "refund-1", "--scope", "refunds", "--force")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, `forgot "refund-1"`)
}
