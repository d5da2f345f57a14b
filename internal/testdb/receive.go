package testdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// patience is how long Receive and WaitFor wait before failing the test: long enough never to
// fail a loaded machine's run for slowness, short of go test's own timeout, so that a broken
// property fails its test instead of hanging the run. No timing is asserted.
const patience = 30 * time.Second

// Receive returns the next value from c, failing the test if none comes within 30 s.
func Receive[T any](t testing.TB, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(patience):
		t.Fatal("testdb: nothing came within 30 s")
		panic("unreachable")
	}
}

// WaitFor calls cond on the test's goroutine until it returns true, failing the test if it has
// not within 30 s, with msgAndArgs (a format and its arguments) saying what was awaited. cond may
// use require: it runs where FailNow may be called, unlike the condition of require.Eventually,
// which runs on a goroutine of its own. For the same reason cond must not block: a call that
// could wait (a lock, a query behind a row lock) takes a context with a timeout of its own.
func WaitFor(t testing.TB, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	pause := time.Millisecond
	for deadline := time.Now().Add(patience); !cond(); pause = min(2*pause, 50*time.Millisecond) {
		time.Sleep(pause) // soon at first, then no more than 20 times a second
		if time.Now().After(deadline) {
			what := "the condition"
			if len(msgAndArgs) > 0 {
				what = fmt.Sprintf(fmt.Sprint(msgAndArgs[0]), msgAndArgs[1:]...)
			}
			t.Fatalf("testdb: not within 30 s: %s", what)
		}
	}
}

// Context returns a context that ends after the same 30 s as Receive and WaitFor, or when the
// test ends: for a wait that takes one (clock.Fake.WaitForTimers, say), so that it fails the
// test rather than hanging it.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	t.Cleanup(cancel)
	return ctx
}

// Moved waits until the time that query (with args) reads on pool is later than its first
// reading: a lease's expiry renewed, say. It is for a function that runs off the test's
// goroutine (a job's, a run's), where WaitFor may not be called: it returns ctx's cause when ctx
// ends first (the lease was lost), and an error after the same 30 s as WaitFor.
func Moved(ctx context.Context, pool *pgxpool.Pool, query string, args ...any) error {
	read := func() (t time.Time, err error) {
		if err = pool.QueryRow(ctx, query, args...).Scan(&t); err != nil && ctx.Err() != nil {
			err = context.Cause(ctx) // ended mid-query: why it ended is the news
		}
		return t, err
	}
	first, err := read()
	if err != nil {
		return err
	}
	giveUp := time.After(patience)
	for {
		now, err := read()
		if err != nil {
			return err
		}
		if now.After(first) {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-giveUp:
			return fmt.Errorf("testdb: not within %s: %s moved past %s", patience, query, first)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
