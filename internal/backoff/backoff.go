// Package backoff says how long to wait before each retry: capped exponential backoff with
// jitter, one policy for every pglock package and backend (PostgreSQL's and Redis's alike).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/pglock/pglock/internal/clock"
)

// Capped is capped exponential backoff: the n-th wait is drawn from [d/2, d], where d is First
// doubled n-1 times, at most Max.
type Capped struct {
	First time.Duration
	Max   time.Duration
}

// Delay is the wait before retry n (counting from 1).
func (b Capped) Delay(n int) time.Duration {
	d := b.First
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2 // stops at Max, long before it could overflow
	}
	return Jitter(min(d, b.Max))
}

// Sleep waits for retry n on c, and reports false if ctx ended first.
func (b Capped) Sleep(ctx context.Context, c clock.Clock, n int) bool {
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
