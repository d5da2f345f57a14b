package leader

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/notify"
	"github.com/pglock/pglock/tablelock"
)

// Leader is an election's leader as the database has it. (ForceResign's leaves Since and
// Candidates zero.)
type Leader struct {
	Election   string
	Holder     string    // the holder id of the leader's lock
	Instance   string    // the leader's process, app@host:pid
	Term       int64     // the lock's fencing token
	Since      time.Time // when the term began, by the database's clock
	ExpiresAt  time.Time // when its lease ends unless renewed, by the database's clock
	Candidates int       // how many candidates wait
}

// Current returns the leader of election name, or an error matching [pglock.ErrNoLeader].
func Current(ctx context.Context, pool *pgxpool.Pool, name string) (Leader, error) {
	l, _, err := current(ctx, pool, name)
	return l, err
}

// current is Current and the database's time of the answer.
func current(ctx context.Context, pool *pgxpool.Pool, name string) (Leader, time.Time, error) {
	if err := checkArgs(pool, name); err != nil {
		return Leader{}, time.Time{}, err
	}
	r, err := db.New(db.Translating(pool)).GetLeader(ctx, lockPrefix+name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Leader{}, time.Time{}, errs.Errorf("%w: election %q", pglock.ErrNoLeader, name)
	case err != nil:
		return Leader{}, time.Time{}, errs.Errorf("leader of %q: %w", name, err)
	}
	return Leader{
		Election: name, Holder: r.HolderID, Instance: r.Instance, Term: r.FencingToken,
		Since: r.AcquiredAt, ExpiresAt: r.ExpiresAt, Candidates: int(r.Candidates),
	}, r.Now, nil
}

func checkArgs(pool *pgxpool.Pool, name string) error {
	if pool == nil {
		return errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	return validateName(name)
}

// List returns every election with a leader or a waiting candidate, by name; an election
// without a leader has a zero Term.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Leader, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	rows, err := db.New(db.Translating(pool)).ListLeaders(ctx)
	if err != nil {
		return nil, errs.Errorf("list leaders: %w", err)
	}
	leaders := make([]Leader, 0, len(rows))
	for _, r := range rows {
		leaders = append(leaders, leaderOf(r))
	}
	return leaders, nil
}

// ForceResign ends the leadership of election name whoever holds it, as an operator does: the
// leader is told at its next renewal (within a third of its TTL), and the next candidate is
// elected at once with a higher term. It returns the leader it deposed (whoever led when it
// ran: not necessarily the one an earlier Current saw), or an error matching
// [pglock.ErrNoLeader].
func ForceResign(ctx context.Context, pool *pgxpool.Pool, name string) (Leader, error) {
	if err := checkArgs(pool, name); err != nil {
		return Leader{}, err
	}
	released, err := tablelock.ForceRelease(ctx, pool, lockPrefix+name, nil)
	switch {
	case errors.Is(err, pglock.ErrNotHeld):
		return Leader{}, errs.Errorf("%w: election %q", pglock.ErrNoLeader, name)
	case err != nil:
		return Leader{}, errs.Errorf("force %q to resign: %w", name, err)
	}
	return Leader{Election: name, Holder: released.Holder, Instance: released.Instance,
		Term: released.Token, ExpiresAt: released.ExpiresAt}, nil
}

func leaderOf(r db.ListLeadersRow) Leader {
	l := Leader{Election: strings.TrimPrefix(r.LockName, lockPrefix), Candidates: int(r.Candidates)}
	if r.HolderID != nil {
		l.Holder, l.Instance, l.Term = *r.HolderID, db.Deref(r.Instance), db.Deref(r.FencingToken)
		l.Since, l.ExpiresAt = db.Deref(r.AcquiredAt), db.Deref(r.ExpiresAt)
	}
	return l
}

// wakeWatcher has the OnNewLeader watcher read the leader again.
func (e *Elector) wakeWatcher() {
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// watch tells fn of each new leader of the election until ctx ends. It reads the leader when
// woken (this Elector's election, a handoff of the election's lock, a reconnected listener)
// and at the current lease's expiry, when a crashed leader's successor takes over unannounced;
// with nobody leading, every third of the TTL.
func (e *Elector) watch(ctx context.Context, fn func(Leader)) {
	if !e.cfg.DisableNotifications {
		unsubscribe := notify.Subscribe(e.pool, e.cfg.ListenerConnConfig, e.cfg.Logger, db.HandoffChannel, notify.Handler{
			Notify: func(payload string) {
				var h struct {
					LockName string `json:"lock_name"`
				}
				if json.Unmarshal([]byte(payload), &h) == nil && h.LockName == e.lockName {
					e.wakeWatcher()
				}
			},
			Listening: e.wakeWatcher,
		})
		defer unsubscribe()
	}
	var seen int64
	for {
		next := e.cfg.TTL / 3
		l, now, err := current(ctx, e.pool, e.name)
		switch {
		case err == nil:
			if l.Term != seen {
				seen = l.Term
				fn(l)
			}
			next = max(l.ExpiresAt.Sub(now), 0) + 10*time.Millisecond
		case errors.Is(err, pglock.ErrNoLeader):
		case ctx.Err() != nil:
			return
		default:
			e.cfg.Logger.Warn("pglock: could not read the leader", "election", e.name, "error", err)
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-e.changed:
		case <-t.C:
		}
		t.Stop()
	}
}
