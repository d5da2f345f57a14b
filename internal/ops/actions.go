package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

// Released is the holding a force-release ended.
type Released = tablelock.Released

// ForceRelease releases the table lock name from whoever holds it, or, when token is not nil,
// only from the holding with that token (tablelock.ForceRelease: pglock.ErrNotHeld when nobody
// holds it, pglock.ErrLocked when another holding does).
func ForceRelease(ctx context.Context, pool *pgxpool.Pool, name string, token *int64) (Released, error) {
	var opts *tablelock.ForceReleaseOptions
	if token != nil {
		if *token <= 0 { // tablelock's 0 is "whoever holds it": never what an operator saw
			return Released{}, errs.Errorf("%w: token %d is not a fencing token", pglock.ErrInvalidArgument, *token)
		}
		opts = &tablelock.ForceReleaseOptions{Token: *token}
	}
	return tablelock.ForceRelease(ctx, pool, name, opts)
}

// Resign deposes the leader of election, or, when term is not nil, only the leader of that
// term: pglock.ErrNoLeader (and ErrNotHeld) when there is none, pglock.ErrLocked when another
// term leads. The next candidate is elected at once with a higher term.
func Resign(ctx context.Context, pool *pgxpool.Pool, election string, term *int64) (Released, error) {
	if err := pglock.ValidateName(election); err != nil || len(election) > leader.MaxNameLen {
		return Released{}, errs.Errorf("%w: %q is not an election's name (1 to %d bytes of UTF-8 without NUL)", pglock.ErrInvalidName, election, leader.MaxNameLen)
	}
	released, err := ForceRelease(ctx, pool, leader.LockName(election), term)
	switch {
	case errors.Is(err, pglock.ErrNotHeld):
		return Released{}, errs.Errorf("%w: election %q has none: nothing was done (%w)", pglock.ErrNoLeader, election, err)
	case errors.Is(err, pglock.ErrLocked):
		return Released{}, errs.Errorf("election %q has a new term: nothing was done (%w)", election, err)
	}
	return released, err
}

// ParseAdvisoryKey reads an advisory key as operators write it and the locks page shows it: a
// bigint, or NS,ID for a pair of ints.
func ParseAdvisoryKey(s string) (advisory.Key, error) {
	if id, err := strconv.ParseInt(s, 10, 64); err == nil {
		return advisory.Int64Key(id), nil
	}
	nsText, idText, ok := strings.Cut(s, ",")
	ns, err1 := strconv.ParseInt(nsText, 10, 32)
	id, err2 := strconv.ParseInt(idText, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return advisory.Key{}, fmt.Errorf("%w: %q is not an advisory key (a bigint, or NS,ID)", pglock.ErrInvalidArgument, s)
	}
	return advisory.PairKey(int32(ns), int32(id)), nil
}

// AdvisoryName is the key of an advisory lock taken by name, in namespace ("" for none).
func AdvisoryName(namespace, name string) advisory.Key {
	return advisory.NamespacedKey(namespace, name)
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
