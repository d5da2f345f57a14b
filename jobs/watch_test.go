package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// Duplicates of one running key waiting in one process share one registration and one check
// of the key, done when the run's lease could end: while the run goes on, they cost the
// database nothing more, however many they are; each in a RunTx elsewhere is checked with
// backoff instead (no lease says until when). The outcome still reaches every one.
func TestDuplicatesWaitingInOneProcessShareOneRegistrationAndOneCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		inTx      bool
		maxWindow int64 // statements the waiting process may send in the window
	}{
		{"run under a lease", false, 2},    // the lease (30 s) outlasts the window: nothing to check
		{"run in a transaction", true, 30}, // a check every second at most, after backing off
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			ctx := testdb.Context(t)
			runner := newDeduper(t, d.Pool, nil)
			var statements testdb.QueryCounter
			waiting := newDeduper(t, d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &statements }), nil)

			running, finish := make(chan struct{}), make(chan struct{})
			ran := make(chan error, 1)
			go func() {
				var err error
				if tt.inTx {
					_, err = runner.RunTx(ctx, "k", nil, func(context.Context, pgx.Tx) error { close(running); <-finish; return nil })
				} else {
					_, err = runner.Run(ctx, "k", nil, func(context.Context) error { close(running); <-finish; return nil })
				}
				ran <- err
			}()
			<-running

			const n = 100
			var wg sync.WaitGroup
			outcomes := make(chan jobs.Outcome, n)
			for range n {
				wg.Go(func() {
					res, err := waiting.Run(ctx, "k", &jobs.Options{Wait: true}, func(context.Context) error {
						t.Error("a duplicate ran the key")
						return nil
					})
					if err != nil {
						t.Errorf("a duplicate: %v", err)
					}
					outcomes <- res.Outcome
				})
			}
			waitForWaiter(t, d.Pool, "k")
			// Every duplicate's first claims are over once the process has sent nothing for
			// half a second (a sleep of fixed length would not say so on a busy machine).
			last, since := statements.Count(), time.Now()
			testdb.WaitFor(t, func() bool {
				if c := statements.Count(); c != last {
					last, since = c, time.Now()
				}
				return time.Since(since) > 500*time.Millisecond
			}, "the duplicates' first claims are over")
			var registrations int
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_job_waiters WHERE job_key = 'k'`).Scan(&registrations))
			require.Equal(t, 1, registrations, "one registration for the process")

			before := statements.Count()
			time.Sleep(2 * time.Second)
			require.LessOrEqual(t, statements.Count()-before, tt.maxWindow, "statements while %d duplicates waited 2 s", n)

			close(finish)
			require.NoError(t, testdb.Receive(t, ran))
			wg.Wait()
			close(outcomes)
			for o := range outcomes {
				require.Equal(t, jobs.OutcomeAlreadyDone, o)
			}
		})
	}
}

// 400 duplicates of one running key, in four processes, are all answered once the run ends:
// the announcement wakes each process's watch, and every duplicate claims again. How long they
// took is logged (the figure of issue 37: 33–195 ms before the watches).
func TestFourHundredDuplicatesInFourProcessesAreAnsweredWhenTheRunEnds(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	runner := newDeduper(t, d.Pool, nil)
	running, finish := make(chan struct{}), make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		_, err := runner.Run(ctx, "k", nil, func(context.Context) error { close(running); <-finish; return nil })
		ran <- err
	}()
	<-running

	type answer struct {
		at      time.Time
		outcome jobs.Outcome
	}
	answers := make(chan answer, 400)
	for range 4 {
		process := newDeduper(t, d.NewPool(t, nil), nil)
		for range 100 {
			go func() {
				res, err := process.Run(ctx, "k", &jobs.Options{Wait: true}, func(context.Context) error {
					t.Error("a duplicate ran the key")
					return nil
				})
				if err != nil {
					t.Errorf("a duplicate: %v", err)
				}
				answers <- answer{time.Now(), res.Outcome}
			}()
		}
	}
	testdb.WaitFor(t, func() bool {
		var n int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_job_waiters WHERE job_key = 'k'`).Scan(&n))
		return n == 4
	}, "one registration per process")
	time.Sleep(500 * time.Millisecond) // every duplicate waits
	ended := time.Now()
	close(finish)
	require.NoError(t, testdb.Receive(t, ran))
	var slowest time.Duration
	for range 400 {
		a := testdb.Receive(t, answers)
		require.Equal(t, jobs.OutcomeAlreadyDone, a.outcome)
		slowest = max(slowest, a.at.Sub(ended))
	}
	t.Logf("400 duplicates in 4 processes answered within %s of the run's end", slowest)
}
