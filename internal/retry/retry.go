// Package retry says which errors are worth trying again and how long to wait before each try:
// one answer for every pglock package.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

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

// Backoff is capped exponential backoff: the n-th wait is drawn from [d/2, d], where d is First
// doubled n-1 times, at most Max.
type Backoff struct {
	First time.Duration
	Max   time.Duration
}

// Delay is the wait before retry n (counting from 1).
func (b Backoff) Delay(n int) time.Duration {
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2 // stops at Max, long before it could overflow
	}
	return Jitter(min(d, b.Max))
}

// Sleep waits for retry n on c, and reports false if ctx ended first.
func (b Backoff) Sleep(ctx context.Context, c clock.Clock, n int) bool {
	done := make(chan struct{})
	t := c.AfterFunc(b.Delay(n), func() { close(done) })
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Jitter spreads d over [d/2, d], so that clients that failed together retry apart.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// outcomeBackoff is how Record waits between tries.
var outcomeBackoff = Backoff{First: 50 * time.Millisecond, Max: time.Second}

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
