package testdb

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// QueryCounter is a pgx.QueryTracer that counts the queries a connection (or a pool's, set as
// ConnConfig.Tracer) sends: what a test measures a poll's cost by. It counts them by name too
// (sqlc's "-- name: X", or the statement's start), for a failure to say which they were.
type QueryCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	byName map[string]int64
}

// Count returns how many queries were sent so far.
func (c *QueryCounter) Count() int64 { return c.n.Load() }

// ByName returns how many queries of each name were sent so far.
func (c *QueryCounter) ByName() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byName)
}

func (c *QueryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	name := strings.TrimSpace(data.SQL)
	if rest, ok := strings.CutPrefix(name, "-- name: "); ok {
		name, _, _ = strings.Cut(rest, " ")
	} else if len(name) > 40 {
		name = name[:40]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byName == nil {
		c.byName = map[string]int64{}
	}
	c.byName[name]++
	return ctx
}

func (*QueryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// FailureCounter is a pgx.QueryTracer that counts the queries the server refused, and keeps the
// first error: what a test of grants checks nothing was refused by. A query the client ended
// (its context canceled as the test stops what it started) was refused by nobody.
type FailureCounter struct {
	n     atomic.Int64
	first atomic.Value
}

// Count returns how many queries failed so far, and the first one's error ("" if none).
func (c *FailureCounter) Count() (int64, string) {
	first, _ := c.first.Load().(string)
	return c.n.Load(), first
}

func (*FailureCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *FailureCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	var refused *pgconn.PgError
	if errors.As(data.Err, &refused) && refused.Code != pgerrcode.QueryCanceled {
		c.n.Add(1)
		c.first.CompareAndSwap(nil, data.Err.Error())
	}
}
