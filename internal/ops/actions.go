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

// ErrChanged means that what an operator acted on changed since they saw it: nothing was done.
var ErrChanged = errors.New("pglock: changed meanwhile")

// ForceRelease releases the table lock name from whoever holds it, or, when token is not nil,
// only from the holding with that token (ErrChanged otherwise), checked and released in one
// transaction: pglock.ErrNotHeld if nobody holds it (released meanwhile).
func ForceRelease(ctx context.Context, pool *pgxpool.Pool, name string, token *int64) (Released, error) {
	if err := pglock.ValidateName(name); err != nil {
		return Released{}, err
	}
	var out Released
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(db.Translating(tx))
		if token != nil {
			held, err := q.LockTokenForUpdate(ctx, name)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("%w: %q was released meanwhile: nothing was done", pglock.ErrNotHeld, name)
			case err != nil:
				return err
			case held != *token:
				return fmt.Errorf("%w: %q changed hands meanwhile (token %d now, not %d): nothing was done", ErrChanged, name, held, *token)
			}
		}
		r, err := q.ForceReleaseLock(ctx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q was released meanwhile", pglock.ErrNotHeld, name)
		}
		if err != nil {
			return err
		}
		out = Released{Holder: r.HolderID, Instance: r.Instance, Token: r.FencingToken, HandedOff: r.HandedOff}
		return nil
	})
	return out, db.Translate(err)
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
