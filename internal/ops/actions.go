package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/jobs"
)

// Released is the holding a force-release ended.
type Released struct {
	Holder, Instance string
	Token            int64
	HandedOff        bool // to the next waiter; else the waiters were woken
}

// ForceRelease releases the table lock name from whoever holds it: pglock.ErrNotHeld if nobody
// does (released meanwhile).
func ForceRelease(ctx context.Context, pool *pgxpool.Pool, name string) (Released, error) {
	if err := pglock.ValidateName(name); err != nil {
		return Released{}, err
	}
	r, err := db.New(db.Translating(pool)).ForceReleaseLock(ctx, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Released{}, fmt.Errorf("%w: %q was released meanwhile", pglock.ErrNotHeld, name)
	}
	if err != nil {
		return Released{}, err
	}
	return Released{Holder: r.HolderID, Instance: r.Instance, Token: r.FencingToken, HandedOff: r.HandedOff}, nil
}

// AdvisoryHolders are the sessions that hold key (granted, in any mode).
func AdvisoryHolders(ctx context.Context, pool *pgxpool.Pool, key advisory.Key) ([]advisory.LockInfo, error) {
	all, err := advisory.List(ctx, pool)
	if err != nil {
		return nil, err
	}
	var holders []advisory.LockInfo
	for _, l := range all {
		if l.Granted && l.Key == numbersOnly(key) {
			holders = append(holders, l)
		}
	}
	return holders, nil
}

// numbersOnly is the key as advisory.List reports it: numbers only.
func numbersOnly(k advisory.Key) advisory.Key {
	if id, ok := k.Int64(); ok {
		return advisory.Int64Key(id)
	}
	return advisory.PairKey(k.Pair())
}

// Terminate ends the backend pid, and with it every lock it holds, waiting until it is gone.
func Terminate(ctx context.Context, pool *pgxpool.Pool, pid int32) error {
	ended, err := db.New(db.Translating(pool)).TerminateBackend(ctx, pid)
	if err != nil {
		return err
	}
	if !ended {
		return fmt.Errorf("%w: backend %d could not be ended (it is gone, or this role may not end it)", pglock.ErrNotHeld, pid)
	}
	return nil
}

// Forget deletes key's job record in scope, so that its next delivery runs it again.
func Forget(ctx context.Context, pool *pgxpool.Pool, scope, key string) error {
	d, err := jobs.New(pool, &jobs.Config{AppName: "pglock-ops", Scope: scope})
	if err != nil {
		return err
	}
	return d.Forget(ctx, key)
}

// Collected is what Collect deleted.
type Collected struct {
	ExpiredLocks    int64 `json:"expired_locks"`
	ExpiredWaiters  int64 `json:"expired_waiters"`
	ExpiredJobs     int64 `json:"expired_jobs"`
	ExpiredCronRuns int64 `json:"expired_cron_runs"`
}

// Collect deletes expired lock rows and waiter places, job records past their retention and
// cron runs past theirs.
func Collect(ctx context.Context, pool *pgxpool.Pool) (Collected, error) {
	counts, err := db.New(db.Translating(pool)).CollectGarbage(ctx)
	if err != nil {
		return Collected{}, err
	}
	expiredJobs, err := jobs.Collect(ctx, pool)
	if err != nil {
		return Collected{}, err
	}
	cronRuns, err := cron.Collect(ctx, pool)
	if err != nil {
		return Collected{}, err
	}
	return Collected{ExpiredLocks: counts.ExpiredLocks, ExpiredWaiters: counts.ExpiredWaiters,
		ExpiredJobs: int64(expiredJobs), ExpiredCronRuns: int64(cronRuns)}, nil
}
