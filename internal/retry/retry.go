// Package retry says which PostgreSQL errors are worth trying again, and records an outcome
// through them: one answer for every pglock package (how long to wait is package backoff's).
package retry

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
)

// Transient reports whether a failed request may succeed if sent again: the connection failed
// (no answer from the server at all), or the server answered with a connection exception, a
// serialization failure or deadlock, a shortage of resources, or its shutdown or a cancel
// (SQLSTATE classes 08, 40, 53 and 57). Every other answer from the server, and a closed pool,
// is final. A request cut short by its context counts as transient: whether to try again is
// then the context's to say.
func Transient(err error) bool {
	if err == nil || errors.Is(err, puddle.ErrClosedPool) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		return pgerrcode.IsConnectionException(code) || pgerrcode.IsTransactionRollback(code) ||
			pgerrcode.IsInsufficientResources(code) || pgerrcode.IsOperatorIntervention(code)
	}
	return true
}

// outcomeBackoff is how Record waits between tries.
var outcomeBackoff = backoff.Capped{First: 50 * time.Millisecond, Max: time.Second}

// Record sends the statement that records an outcome (a job attempt's, a cron run's) for as
// long as its lease lasts, ttl from now, whatever the caller's ctx: what a failing connection
// interrupts is tried again. It returns the first answer that is not a transient failure:
// success, pgx.ErrNoRows (the statement found nothing to record, which the caller explains), or
// the last error.
func Record[T any](ctx context.Context, c clock.Clock, ttl time.Duration, record func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	defer cancel()
	for attempt := 1; ; attempt++ {
		v, err := record(ctx)
		if err == nil || errors.Is(err, pgx.ErrNoRows) || !Transient(err) || !outcomeBackoff.Sleep(ctx, c, attempt) {
			return v, err
		}
	}
}
