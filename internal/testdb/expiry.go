package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// LiveWhenDone waits for ctx to end and reports whether the lease whose expiry expirySQL
// selects (one timestamptz, with args) was still live on the database at that moment: what it
// has left when asked, plus the time since ctx ended (counted from before the query, so never
// overstated), which a loaded machine can make long. Call it before ctx ends, from any
// goroutine: it reports a failed query, or a ctx still running after 30 s, with t.Errorf, and
// then false.
func LiveWhenDone(t testing.TB, ctx context.Context, pool *pgxpool.Pool, expirySQL string, args ...any) bool {
	ended := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() { ended <- time.Now() })
	var endedAt time.Time
	select {
	case endedAt = <-ended:
	case <-time.After(patience):
		t.Errorf("testdb: the holder's ctx did not end within 30 s")
		return false
	}
	asked := time.Now()
	var leftMicros int64
	err := pool.QueryRow(context.Background(),
		`SELECT (extract(epoch FROM (`+expirySQL+`) - clock_timestamp()) * 1e6)::bigint`, args...).Scan(&leftMicros)
	if err != nil {
		t.Errorf("testdb: the lease's expiry: %v", err)
		return false
	}
	return time.Duration(leftMicros)*time.Microsecond+asked.Sub(endedAt) > 0
}
