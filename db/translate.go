package db

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglock/pglock"
)

// Translating wraps conn so that every error its queries return passes through Translate.
func Translating(conn DBTX) DBTX { return translatingConn{conn} }

// Translate maps a PostgreSQL error to pglock's vocabulary, keeping the original reachable with
// errors.As; other errors, pgx.ErrNoRows included, come back unchanged.
func Translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "42P01", "42883": // undefined_table, undefined_function
		return fmt.Errorf("%w: %w", pglock.ErrNotMigrated, err)
	case "42704": // undefined_object: one of pglock's types, or anything else (a setting, a role)
		if namesPglockType(pgErr.Message) {
			return fmt.Errorf("%w: %w", pglock.ErrNotMigrated, err)
		}
	case "22023": // invalid_parameter_value, raised by the SQL contract's argument checks
		return fmt.Errorf("%w: %w", invalidParameter(pgErr.Message), err)
	// An argument its type refuses: invalid_text_representation (JSON that is not jsonb's),
	// untranslatable_character (NUL in jsonb), character_not_in_repertoire (text not UTF-8).
	case "22P02", "22P05", "22021":
		return fmt.Errorf("%w: %w", pglock.ErrInvalidArgument, err)
	case "55P03": // lock_not_available: lock_timeout ran out
		return fmt.Errorf("%w: %w", pglock.ErrLockTimeout, err)
	case "42501": // insufficient_privilege, raised by pglock_check_schema_is_safe among others
		if strings.HasPrefix(pgErr.Message, "pglock: every role may create objects") {
			return fmt.Errorf("%w: %w", pglock.ErrUnsafeSchema, err)
		}
	}
	return err
}

// invalidParameter reads the parameter name that starts every argument error the SQL functions
// raise ("p_ttl_ms: must be ...").
func invalidParameter(message string) error {
	param, _, _ := strings.Cut(message, ":")
	switch param {
	case "p_lock_name":
		return pglock.ErrInvalidName
	case "p_ttl_ms", "p_ttl_seconds":
		return pglock.ErrInvalidTTL
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

// pglockTypes are the types pglock's migrations create (TestEveryPglockTypeIsKnown checks).
var pglockTypes = []string{"pglock_acquisition"}

// namesPglockType reports whether an error message names one of pglock's types. The message is
// in the server's lc_messages language, but the names in it are never translated.
func namesPglockType(message string) bool {
	for _, name := range pglockTypes {
		if strings.Contains(message, name) {
			return true
		}
	}
	return false
}
