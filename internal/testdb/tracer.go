package testdb

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// QueryCounter is a pgx.QueryTracer that counts the queries a connection (or a pool's, set as
// ConnConfig.Tracer) sends: what a test measures a poll's cost by.
type QueryCounter struct{ n atomic.Int64 }

// Count returns how many queries were sent so far.
func (c *QueryCounter) Count() int64 { return c.n.Load() }

func (c *QueryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*QueryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
