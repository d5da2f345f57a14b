package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/console"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
)

// largeSQL fills a database as a busy production one: 10,000 table locks (a waiter on every
// tenth), 100,000 job records in four scopes and 10,000 cron runs of one schedule.
const largeSQL = `
INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
SELECT 'tenant:' || i, md5(i::text), i, now() - i * interval '1 second', now() + interval '1 hour', '{"shard": 7}', 'worker@host-' || (i % 20) || ':1'
  FROM generate_series(1, 10000) AS i;
INSERT INTO distributed_lock_waiters (lock_name, holder_id, instance, ttl_ms, enqueued_at, expires_at)
SELECT 'tenant:' || i, md5('w' || i), 'worker@host-1:1', 30000, now(), now() + interval '1 hour'
  FROM generate_series(10, 10000, 10) AS i;
INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token, started_at, finished_at,
                         last_error, retain_until, created_at)
SELECT 'scope-' || (i % 4), 'order:' || i, CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END, md5(i::text),
       'worker@host-' || (i % 20) || ':1', 1, i, now(), now(), CASE WHEN i % 50 = 0 THEN 'card declined' END,
       now() + interval '7 days', now()
  FROM generate_series(1, 100000) AS i;
INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, instance, fencing_token, created_at, started_at, finished_at)
SELECT 'rollup', date_trunc('minute', now()) - i * interval '1 minute', 'scheduled', 'ran', 1, 'worker@host-1:1', i, now(), now(), now()
  FROM generate_series(1, 10000) AS i;
ANALYZE;`

// BenchmarkPages: the time to serve each page (the handler, its queries and its template) on a
// database holding 10,000 locks, 100,000 job records and 10,000 cron runs, as a refresh asks
// for it. Goal: p99 ≤ 50 ms for every page.
func BenchmarkPages(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	s, err := cron.New(d.Pool, nil)
	require.NoError(b, err)
	require.NoError(b, s.Add("rollup", "@every 1m", nil, func(context.Context, cron.Run) error { return nil }))
	require.NoError(b, s.Start(ctx))
	require.NoError(b, s.Stop(ctx))
	_, err = d.Pool.Exec(ctx, largeSQL)
	require.NoError(b, err)
	h, err := console.New(d.Pool, &console.Options{RefreshInterval: time.Second})
	require.NoError(b, err)
	for _, path := range []string{
		"/", "/locks", "/locks?name=tenant:99", "/locks?after=tenant:5000", "/jobs", "/jobs?scope=scope-1&status=failed",
		"/jobs?key=order:9*", "/jobs?after_scope=scope-2&after_key=order:5000", "/job?scope=scope-3&key=order:7",
		"/cron", "/schedule?name=rollup", "/leaders", "/ratelimits",
	} {
		b.Run(path, func(b *testing.B) {
			var samples []time.Duration
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, path, nil)
				req.Host = "localhost"
				w := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(w, req)
				samples = append(samples, time.Since(start))
				if w.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", path, w.Code, w.Body)
				}
			}
			benchkit.Percentiles(b, "page", samples)
		})
	}
}
