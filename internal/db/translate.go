package db

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglock/pglock"
)

// Translating wraps conn so that every error its queries return passes through Translate.
func Translating(conn DBTX) DBTX { return translatingConn{conn} }

// Translate maps a PostgreSQL error to pglock's vocabulary, keeping the original reachable with
// errors.As; other errors, pgx.ErrNoRows included, come back unchanged. It reads the SQLSTATE
// and the fields the SQL contract sets (COLUMN, CONSTRAINT), never the message, which the
// server may translate and the contract may reword. An error of another driver (lib/pq's) is
// read by its SQLState method alone.
func Translate(err error) error {
	state, ok := readState(err)
	if !ok {
		return err
	}
	switch state.code {
	case pgerrcode.UndefinedTable, pgerrcode.UndefinedFunction:
		return fmt.Errorf("%w: %w", pglock.ErrNotMigrated, err)
	case pgerrcode.InvalidParameterValue: // the contract's argument checks: COLUMN names the argument
		return fmt.Errorf("%w: %w", invalidArgument(state.column), err)
	// An argument its type refuses: JSON that is not jsonb's, NUL in jsonb, text not UTF-8.
	case pgerrcode.InvalidTextRepresentation, pgerrcode.UntranslatableCharacter, pgerrcode.CharacterNotInRepertoire:
		return fmt.Errorf("%w: %w", pglock.ErrInvalidArgument, err)
	case pgerrcode.NoDataFound: // a contract function found no such object (COLUMN names the argument)
		return fmt.Errorf("%w: %w", pglock.ErrNotFound, err)
	case pgerrcode.LockNotAvailable: // lock_timeout ran out
		return fmt.Errorf("%w: %w", pglock.ErrLockTimeout, err)
	case pgerrcode.UniqueViolation:
		if state.constraint == "pglock_cron_schedules_pkey" {
			return fmt.Errorf("%w: %w", pglock.ErrExists, err)
		}
	case pgerrcode.ObjectNotInPrerequisiteState:
		if state.constraint == "pglock_cron_defined_in_code" {
			return fmt.Errorf("%w: %w", pglock.ErrDefinedInCode, err)
		}
	case pgerrcode.InsufficientPrivilege:
		if state.constraint == "pglock_schema_is_safe" {
			return fmt.Errorf("%w: %w", pglock.ErrUnsafeSchema, err)
		}
	}
	return err
}

// serverState is what Translate reads of an error the server sent.
type serverState struct{ code, column, constraint string }

// readState reads the server's error in err: all of pgx's, and the SQLSTATE of any other
// driver's error that has a SQLState method (lib/pq's has).
func readState(err error) (serverState, bool) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return serverState{code: pgErr.Code, column: pgErr.ColumnName, constraint: pgErr.ConstraintName}, true
	}
	var other interface{ SQLState() string }
	if errors.As(err, &other) {
		return serverState{code: other.SQLState()}, true
	}
	return serverState{}, false
}

// ConnectionEnded says whether err is the server ending the connection (SQLSTATE class 08, or
// 57P: shut down, terminated), after which what was in flight on it may or may not have been
// done.
func ConnectionEnded(err error) bool {
	code := StateOf(err)
	return pgerrcode.IsConnectionException(code) || strings.HasPrefix(code, "57P")
}

// StatementCanceled says whether err is the server canceling a statement (SQLSTATE 57014): a
// client's cancel request (lib/pq sends one when the statement's context ends), a
// statement_timeout, or an operator's pg_cancel_backend.
func StatementCanceled(err error) bool {
	return StateOf(err) == pgerrcode.QueryCanceled
}

// StateOf returns the SQLSTATE of the server's error in err, or "" if err holds none.
func StateOf(err error) string {
	state, _ := readState(err)
	return state.code
}

// invalidArgument is the error for the argument a contract function refused.
func invalidArgument(param string) error {
	switch param {
	case "p_lock_name":
		return pglock.ErrInvalidName
	case "p_ttl_ms", "p_ttl_seconds":
		return pglock.ErrInvalidTTL
	case "p_spec", "p_time_zone":
		return pglock.ErrInvalidSpec
	default:
		return pglock.ErrInvalidArgument
	}
}

type translatingConn struct{ conn DBTX }

func (c translatingConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := c.conn.Exec(ctx, sql, args...)
	return tag, Translate(err)
}

func (c translatingConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := c.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, Translate(err)
	}
	return translatingRows{rows}, nil
}

func (c translatingConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return translatingRow{c.conn.QueryRow(ctx, sql, args...)}
}

type translatingRow struct{ row pgx.Row }

func (r translatingRow) Scan(dest ...any) error { return Translate(r.row.Scan(dest...)) }

type translatingRows struct{ pgx.Rows }

func (r translatingRows) Err() error { return Translate(r.Rows.Err()) }

func (r translatingRows) Scan(dest ...any) error { return Translate(r.Rows.Scan(dest...)) }
