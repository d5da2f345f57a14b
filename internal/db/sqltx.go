package db

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglock/pglock"
)

// InTx is the caller's pgx transaction as a DBTX whose errors are translated, or an error
// matching pglock.ErrInvalidArgument for a nil one.
func InTx(tx pgx.Tx) (DBTX, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil transaction", pglock.ErrInvalidArgument)
	}
	return Translating(tx), nil
}

// InSQLTx is the caller's database/sql transaction, of any PostgreSQL driver, as a DBTX whose
// errors are translated: the generated queries run on it unchanged, for they pass plain Go
// values and scan into types database/sql converts to. A nil transaction is refused with an
// error matching pglock.ErrInvalidArgument, and so is one already committed or rolled back
// (sql.ErrTxDone, still matchable) and one on a server that is not PostgreSQL, named.
func InSQLTx(tx *sql.Tx) (DBTX, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil *sql.Tx", pglock.ErrInvalidArgument)
	}
	return sqlTx{tx}, nil
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return pgconn.NewCommandTag(""), t.translate(ctx, err)
}

// Query is not supported: pglock's statements inside a caller's transaction return one row.
func (t sqlTx) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("pglock: db.InSQLTx runs single-row queries and statements only")
}

func (t sqlTx) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return sqlRow{t: t, ctx: ctx, row: t.tx.QueryRowContext(ctx, query, args...)}
}

type sqlRow struct {
	t   sqlTx
	ctx context.Context
	row *sql.Row
}

func (r sqlRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return pgx.ErrNoRows // what the callers of generated queries test for
	}
	return r.t.translate(r.ctx, err)
}

// translate is Translate for a database/sql error, which may also say that the transaction is
// over, or come from a server that is not PostgreSQL. PostgreSQL's errors carry a SQLSTATE
// (pgx's and lib/pq's alike); an error that has none and that the client did not make itself
// (a canceled ctx, a broken connection) is checked by asking the server what it is, in the same
// transaction, so that the error can name it.
func (t sqlTx) translate(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("%w: the transaction is already committed or rolled back: %w", pglock.ErrInvalidArgument, err)
	case StateOf(err) != "" || ctx.Err() != nil || MadeByClient(err):
		return Translate(err)
	}
	var version string
	probe := t.tx.QueryRowContext(ctx, "SELECT version()").Scan(&version)
	switch {
	case probe == nil && strings.HasPrefix(version, "PostgreSQL"):
		return err
	case probe == nil:
		return fmt.Errorf("%w: the transaction is on a server that is not PostgreSQL: it says it is %q (its driver's error is %T): %w",
			pglock.ErrInvalidArgument, version, err, err)
	case StateOf(probe) != "" || MadeByClient(probe):
		return err
	}
	return fmt.Errorf("%w: the transaction is on a server that is not PostgreSQL: it has no version() (its driver's error is %T): %w",
		pglock.ErrInvalidArgument, err, err)
}

// MadeByClient says whether err is the client's own: the connection broke or was closed.
func MadeByClient(err error) bool {
	var netErr net.Error
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}
