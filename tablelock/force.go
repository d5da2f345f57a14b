package tablelock

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// Released is the holding ForceRelease ended.
type Released struct {
	Holder, Instance string
	Token            int64
	ExpiresAt        time.Time // when its lease would have ended
	HandedOff        bool      // to the next waiter, with a higher token; else the waiters were woken
}

// ForceReleaseOptions narrow a ForceRelease; nil releases whoever holds the lock.
type ForceReleaseOptions struct {
	// Token releases only the holding with this fencing token: an operator who saw one holder
	// does not release the next by mistake. 0: whoever holds it. The check locks the lock's row
	// (SELECT ... FOR UPDATE), which needs UPDATE on distributed_locks besides EXECUTE on
	// force_release_lock.
	Token int64
}

// ForceRelease ends the holding of the table lock name, for operators (pglockctl release): the
// next waiter gets it with a higher token, or the waiters are woken, and the holder learns at
// its next renewal that it lost the lock ([pglock.CauseForceReleased]); its fenced writes fail
// from now on. Checked and released in one transaction. Nothing is done, and the error says
// why, when nobody holds it ([pglock.ErrNotHeld]) or, with opts.Token, another holding does
// ([pglock.ErrLocked]).
func ForceRelease(ctx context.Context, pool *pgxpool.Pool, name string, opts *ForceReleaseOptions) (Released, error) {
	if pool == nil {
		return Released{}, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	if err := pglock.ValidateName(name); err != nil {
		return Released{}, err
	}
	if opts != nil && opts.Token < 0 {
		return Released{}, errs.Errorf("%w: token %d: tokens are positive", pglock.ErrInvalidArgument, opts.Token)
	}
	var out Released
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(db.Translating(tx))
		if opts != nil && opts.Token != 0 {
			held, err := q.LockTokenForUpdate(ctx, name)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				return errs.Errorf("%w: it was released meanwhile: nothing was done", pglock.ErrNotHeld)
			case err != nil:
				return err
			case held != opts.Token:
				return errs.Errorf("%w: it changed hands meanwhile (token %d now, not %d): nothing was done", pglock.ErrLocked, held, opts.Token)
			}
		}
		r, err := q.ForceReleaseLock(ctx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return errs.Errorf("%w: nobody holds it", pglock.ErrNotHeld)
		}
		if err != nil {
			return err
		}
		out = Released{Holder: r.HolderID, Instance: r.Instance, Token: r.FencingToken, ExpiresAt: r.ExpiresAt, HandedOff: r.HandedOff}
		return nil
	})
	if err != nil {
		return Released{}, errs.Errorf("force-release %q: %w", name, err)
	}
	return out, nil
}
