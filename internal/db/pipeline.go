package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Around runs each query it is given in one round trip together with the statements before and
// after it (such as SAVEPOINT, or COMMIT), so that a generated query and the transaction
// control around it cost one round trip, not three. The statements take no arguments. When the
// server refuses one, it skips those after it, and that error is returned; an error the client
// sees after sending (a failed Scan, a canceled ctx) leaves those after it run or not.
func Around(tx pgx.Tx, before, after []string) DBTX {
	return &around{conn: tx, before: before, after: after}
}

// Begin runs the query it is given in a transaction that it begins on conn, in one round trip
// with the BEGIN (pgx's Batch.BeginTx): pgx's Conn.Begin costs a round trip of its own. Tx is
// then the transaction; it is open if the query ran, and ended if the BEGIN failed.
func Begin(conn *pgx.Conn) *Beginning {
	return &Beginning{around{conn: conn, begin: true}}
}

// Beginning is what Begin returns.
type Beginning struct{ around }

// Tx is the transaction begun, nil until the query is sent.
func (b *Beginning) Tx() pgx.Tx { return b.tx }

type around struct {
	conn interface {
		SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
	}
	begin         bool   // Begin's: BEGIN goes first,
	tx            pgx.Tx // and this is the transaction it began
	before, after []string
}

func (a *around) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &aroundRow{a: a, ctx: ctx, sql: sql, args: args}
}

func (a *around) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := a.send(ctx, sql, args, func(br pgx.BatchResults) (err error) {
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// Query runs a query of many rows after the statements before it; not with statements after
// it, which would run only once its rows were read.
func (a *around) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if len(a.after) > 0 {
		return nil, errors.New("pglock: db.Around runs a query of many rows with no statement after it")
	}
	br, before := a.sendBatch(ctx, sql, args)
	for range before {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, results: br}, nil
}

// batchRows are the rows of a query sent in a batch, which they close after themselves.
type batchRows struct {
	pgx.Rows
	results pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.results != nil {
		r.results.Close()
		r.results = nil
	}
}

// sendBatch sends the statements and the query, and returns their results, with how many
// statements come before the query's.
func (a *around) sendBatch(ctx context.Context, sql string, args []any) (_ pgx.BatchResults, before int) {
	b := &pgx.Batch{}
	if a.begin {
		b.BeginTx(pgx.TxOptions{})
	}
	for _, s := range a.before {
		b.Queue(s)
	}
	before = len(b.QueuedQueries)
	b.Queue(sql, args...)
	for _, s := range a.after {
		b.Queue(s)
	}
	br := a.conn.SendBatch(ctx, b)
	if a.begin {
		a.tx = br.Tx()
	}
	return br, before
}

// send sends the statements and the query, and reads the query's result with read.
func (a *around) send(ctx context.Context, sql string, args []any, read func(pgx.BatchResults) error) error {
	br, before := a.sendBatch(ctx, sql, args)
	err := func() error {
		for range before {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if err := read(br); err != nil {
			return err
		}
		for range a.after {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		return nil
	}()
	closeErr := br.Close() // the first error of the batch again, if any
	if err != nil {
		return err
	}
	return closeErr
}

type aroundRow struct {
	a    *around
	ctx  context.Context
	sql  string
	args []any
}

func (r *aroundRow) Scan(dest ...any) error {
	return r.a.send(r.ctx, r.sql, r.args, func(br pgx.BatchResults) error { return br.QueryRow().Scan(dest...) })
}
