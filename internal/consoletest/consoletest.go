// Package consoletest seeds a database with what the console shows, for its handler tests and
// its browser tests alike.
package consoletest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/ratelimit"
	"github.com/pglock/pglock/tablelock"
)

// Seeded is a database with one of everything the console shows: a table lock (Lock,
// "orders:42") and an election's, a semaphore's weighted places of two keys ("exports") and a
// waiter, an advisory lock, a succeeded, a failed and a superseded job
// record, a pending debounced key, a schedule with a failed run, a rate-limit key in use, and a
// leader.
type Seeded struct {
	DB   *testdb.DB
	Lock *tablelock.Lock
}

// Seed makes a database with one of everything; what it started ends with the test.
func Seed(t testing.TB) Seeded {
	t.Helper()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	l, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{AppName: "console-test"}) // another pool than the console's
	require.NoError(t, err)
	t.Cleanup(func() { l.Close(context.Background()) })
	lk, err := l.TryAcquire(ctx, "orders:42", &tablelock.AcquireOptions{Metadata: map[string]any{"owner": "billing"}})
	require.NoError(t, err)
	// A semaphore of 4 places, at most 3 a tenant: tenant-a holds 3, tenant-b 1, and a waiter of
	// tenant-b's wants 2.
	for _, p := range []tablelock.Places{{Permits: 4, Take: 3, Key: "tenant-a", PerKey: 3}, {Permits: 4, Key: "tenant-b", PerKey: 3}} {
		_, err = l.TryAcquirePlaces(ctx, "exports", p, nil)
		require.NoError(t, err)
	}
	go l.AcquirePlaces(ctx, "exports", tablelock.Places{Permits: 4, Take: 2, Key: "tenant-b", PerKey: 3}, nil) // until the Locker closes
	testdb.WaitFor(t, func() bool {
		var n int
		d.Pool.QueryRow(ctx, `SELECT count(*) FROM distributed_lock_waiters WHERE lock_name = 'pglock.semaphore/exports'`).Scan(&n)
		return n == 1
	}, "the semaphore's waiter is queued")

	s, err := advisory.Open(ctx, d.Pool, &advisory.Config{RegisterNames: true})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	require.NoError(t, s.Lock(ctx, advisory.StringKey("nightly-report")))

	dd, err := jobs.New(d.Pool, &jobs.Config{AppName: "console-test", Scope: "billing"})
	require.NoError(t, err)
	_, err = dd.RunTx(ctx, "invoice:1", nil, func(context.Context, pgx.Tx) error { return nil })
	require.NoError(t, err)
	_, err = dd.Run(ctx, "invoice:2", nil, func(context.Context) error { return errors.New("card declined <script>") })
	require.Error(t, err)
	// A Supersede attempt superseded by a newer delivery, which succeeded.
	superseding := make(chan struct{})
	superseded := make(chan error, 1)
	go func() {
		_, err := dd.Run(ctx, "sync:user-7", &jobs.Options{Mode: jobs.Supersede}, func(ctx context.Context) error {
			close(superseding)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		superseded <- err
	}()
	testdb.Receive(t, superseding)
	_, err = dd.Run(ctx, "sync:user-7", &jobs.Options{Mode: jobs.Supersede}, func(context.Context) error { return nil })
	require.NoError(t, err)
	require.ErrorIs(t, testdb.Receive(t, superseded), pglock.ErrSuperseded)
	// A debounced key pending for an hour.
	_, err = dd.Debounce(ctx, "digest:team-3", map[string]int{"events": 2}, jobs.DebounceOptions{Quiet: time.Hour, MaxWait: 24 * time.Hour})
	require.NoError(t, err)

	ran := make(chan struct{}, 10)
	sched, err := cron.New(d.Pool, &cron.Config{AppName: "console-test"})
	require.NoError(t, err)
	require.NoError(t, sched.Add("rollup", "@every 1s", nil, func(context.Context, cron.Run) error {
		ran <- struct{}{}
		return errors.New("rollup failed: disk full")
	}))
	require.NoError(t, sched.Start(ctx))
	testdb.Receive(t, ran)
	require.NoError(t, sched.Stop(ctx))

	lim, err := ratelimit.New(d.Pool, &ratelimit.Config{Name: "partner-api"})
	require.NoError(t, err)
	for range 3 {
		_, err = lim.Allow(ctx, "partner-api:tenant-1", ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 5})
		require.NoError(t, err)
	}

	e, err := leader.New(d.Pool, "reconciler", &leader.Config{AppName: "console-test"})
	require.NoError(t, err)
	electionCtx, stop := context.WithCancel(context.Background())
	done, elected := make(chan error, 1), make(chan struct{})
	go func() {
		done <- e.Run(electionCtx, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) {
			close(elected)
			<-ctx.Done()
		}})
	}()
	t.Cleanup(func() { stop(); <-done })
	testdb.Receive(t, elected)
	return Seeded{DB: d, Lock: lk}
}
