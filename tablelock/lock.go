package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/retry"
)

// Lock is a held table lock. Its methods are safe for concurrent use.
type Lock struct {
	l         *Locker
	ctx       context.Context // the acquisition's, for its observer: a loss is told to the span of the work
	primitive pglock.Primitive
	label     string // the name events report
	name      string
	holder    string
	token     int64
	places    int // a semaphore's places it holds; 0 for a lock
	metadata  map[string]any
	heldFrom  time.Time
	vacancy   time.Duration
	// unreported is set, before anything else can see the lock, on one never handed to its
	// caller (its Locker closed as it was acquired): none of its events is told.
	unreported bool
	lease      *lease.Keeper
}

func newLock(ctx context.Context, l *Locker, req request, token int64, expiresAt, leaseStart time.Time) *Lock {
	lk := &Lock{l: l, ctx: ctx, primitive: req.primitive, label: req.label, name: req.name, holder: req.holder,
		token: token, places: req.places, metadata: req.metadata, heldFrom: time.Now()}
	lk.lease = lease.New(lease.Config{
		Name: req.name, Timing: req.timing, Start: leaseStart, ExpiresAt: expiresAt,
		Ctx: l.ctx, Tracker: (*background)(l), Set: l.renewals, Ref: lk,
		OnLost: func(err error, cause pglock.Cause) {
			l.forget(lk)
			l.cfg.Logger.Error("pglock: lock lost", "lock", lk.name, "token", lk.token, "cause", cause, "error", err)
			lk.observe(pglock.EventLost, func(e *pglock.Event) { e.Cause, e.Held, e.Err = cause, time.Since(lk.heldFrom), err })
		},
		OnRenewFailed: func(err error, failures int) {
			l.cfg.Logger.Warn("pglock: renewal failed; retrying", "lock", lk.name, "failures", failures, "error", err)
			lk.observe(pglock.EventRenewFailed, func(e *pglock.Event) { e.Err = err })
		},
	})
	return lk
}

// Name returns the lock's name.
func (lk *Lock) Name() string { return lk.name }

// Token returns the lock's fencing token: larger than that of every earlier holder of the name.
func (lk *Lock) Token() int64 { return lk.token }

// Metadata returns the metadata the lock was acquired with.
func (lk *Lock) Metadata() map[string]any { return lk.metadata }

// ExpiresAt returns when the lease ends unless renewed, by the database's clock, as of the last
// successful acquisition or renewal.
func (lk *Lock) ExpiresAt() time.Time { return lk.lease.ExpiresAt() }

// Vacancy is how long the name had no live holder before this lock took it, by the database's
// clock: from the expiry of the last lease of another holder its wait saw (by its polls, or
// while listening by the statement that keeps its place in the queue) to the start of its own.
// Zero for a lock handed over by a release, taken by a try, or found free.
func (lk *Lock) Vacancy() time.Duration { return lk.vacancy }

// Deadline returns when, on this process's monotonic clock, the lock is declared lost unless a
// renewal gets through first: the start of the last successful acquisition or renewal, plus
// the TTL less the safety margin, which is always before the database could give it to another.
// Work that must not outlive the lock can check it without a round trip.
func (lk *Lock) Deadline() time.Time { return lk.lease.Deadline() }

// Lost is closed once the lock is lost. It is never closed for a lock released normally.
func (lk *Lock) Lost() <-chan struct{} { return lk.lease.Lost() }

// Err returns nil while the lock is held or was released normally, and once it is lost an
// error matching [pglock.ErrLockLost] that says why.
func (lk *Lock) Err() error { return lk.lease.Err() }

// Extend renews the lease for ttl from now, in one round trip, and keeps renewing it with that
// TTL. A heartbeat under way finishes first; ctx bounds that wait too. On a lock no longer held
// it returns an error matching [pglock.ErrLockLost].
func (lk *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	t, err := lk.l.cfg.timing(ttl)
	if err != nil {
		return err
	}
	return lk.lease.Renew(ctx, &t)
}

// Release gives the lock up, in one round trip: to the first waiter if there is one, else
// freeing it. If ctx ends first, or the connection fails, it returns that error and tries again
// in the background (Close waits for that); the lock is no longer renewed either way. An error
// matching [pglock.ErrLockLost] means the lock had been lost, signalled or not; nothing done
// under it since its last renewal is safe.
func (lk *Lock) Release(ctx context.Context) error { return lk.release(ctx, 0) }

// ReleaseAfter gives the lock up no earlier than held after it was acquired, by the database's
// clock (ShedLock's lockAtLeastFor): as Release does if it has been held that long; otherwise,
// in one round trip, its lease is made to end at that moment, and it is no longer renewed (its
// row's holder is then "pglock.held:" and a digest of the holder id, which no renewal in flight
// matches). Nobody can take it before, even if this process dies meanwhile; the first acquirer
// after takes it (a waiter polls at the lease's end: there is no handoff). The lock is released for its holder at
// once: it is never lost after. Errors are Release's; one that leaves the lock to the background
// retry leaves it until its lease runs out if the database is not reached within the TTL. held
// must be positive, and is rounded up to whole milliseconds.
func (lk *Lock) ReleaseAfter(ctx context.Context, held time.Duration) error {
	if held <= 0 {
		return errs.Errorf("%w: release %q after %s: the time held must be positive", pglock.ErrInvalidArgument, lk.name, held)
	}
	return lk.release(ctx, held)
}

// release releases the lock at once (held 0) or once held since its acquisition.
func (lk *Lock) release(ctx context.Context, held time.Duration) error {
	if !lk.markReleased() {
		if lost := lk.Err(); lost != nil { // released by Locker.Close, which declared it lost
			return lost
		}
		return errs.Errorf("%w: %q was already released", pglock.ErrNotHeld, lk.name)
	}
	err := lk.releaseRow(ctx, held)
	if lost := lk.Err(); lost != nil {
		return lost
	}
	lk.observe(pglock.EventReleased, func(e *pglock.Event) { e.Held = time.Since(lk.heldFrom) })
	return err
}

// markReleased stops keeping the lock; false if it was released already. No need to wait for
// a renewal in flight to end: whatever it finds, a released lock is never declared lost (a
// renewal that lands before the release is undone by it, one after finds the row gone).
func (lk *Lock) markReleased() bool {
	if !lk.lease.Stop() {
		return false
	}
	lk.l.forget(lk)
	return true
}

// releaseRow gives the lock up in the database, at once or once held since its acquisition,
// in one round trip; if ctx ends first or the round trip fails on the way, again in the
// background.
func (lk *Lock) releaseRow(ctx context.Context, held time.Duration) error {
	released, err := lk.l.releaseRow(ctx, lk.name, lk.holder, held)
	switch {
	case err != nil && (ctx.Err() != nil || retry.Transient(err)) && lk.releaseLater(held):
		return errs.Errorf("release %q (trying again in the background): %w", lk.name, err)
	case err != nil:
		return errs.Errorf("release %q (it stays held until its TTL runs out): %w", lk.name, err)
	case !released:
		lost := errs.Errorf("%w: %w: %q was no longer held at release (force-released, or expired and taken)",
			pglock.ErrLockLost, pglock.ErrNotHeld, lk.name)
		if lk.lease.LostBeforeStop(lost) {
			return lost
		}
		return nil // declared lost before, by Close: that loss is the one told
	}
	return nil
}

// releaseLater releases the lock in the background, counted in l.waits so that Close waits for
// it; false once the Locker is closed.
func (lk *Lock) releaseLater(held time.Duration) bool {
	l := lk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.leave(lk.name, lk.holder, lk.lease.Timing().TTL, held) // counted under l.mu, before Close (which sets closed under it) can wait
	return true
}

// Fence verifies, inside tx, that the lock is still held with its token, and keeps it so until
// tx ends: no release, renewal, handoff or takeover of the lock can commit before. Write to the
// protected resource in tx after Fence, and keep tx short: the lock's renewals pass over it
// while tx holds its row, and are tried again until it ends (others' are not held up). It
// returns an error matching [pglock.ErrLockLost] (and signals the loss) when the lock is lost.
//
// Fence also bounds tx on the server, so that a client that stops talking mid-transaction (a
// frozen VM, a silent partition) cannot keep the lock from others for hours: for the rest of
// tx, PostgreSQL ends the session once it has been idle, and cancels a statement once it has
// run, for the time left on the lease plus the lock's safety margin (never looser than a limit
// already in force). Both restart with each statement: fence just before the writes and commit
// at once, and a client that vanishes is cut off by the lease's expiry plus the margin
// (docs/fencing.md).
func (lk *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	q, err := db.InTx(tx)
	if err != nil {
		return err
	}
	return lk.fence(ctx, q)
}

// FenceSQL is Fence for a database/sql transaction, of any PostgreSQL driver (pgx's stdlib,
// lib/pq): GORM's, sqlx's, ent's or bun's, say. docs/databasesql.md shows it.
func (lk *Lock) FenceSQL(ctx context.Context, tx *sql.Tx) error {
	q, err := db.InSQLTx(tx)
	if err != nil {
		return err
	}
	return lk.fence(ctx, q)
}

func (lk *Lock) fence(ctx context.Context, q db.DBTX) error {
	err := lk.Err() // a lock known lost is refused without a round trip
	if err == nil {
		err = fence(ctx, q, lk.name, lk.token, lk.lease.Timing().Margin)
		if errors.Is(err, pglock.ErrLockLost) {
			defer lk.lease.Lose(pglock.CauseForceReleased, err)
		}
	}
	if errors.Is(err, pglock.ErrLockLost) && !errors.Is(err, pglock.ErrClosed) {
		// Every write refused is told, whether or not the loss was noticed before: a holder
		// that goes on writing after its loss is what the refusals alert is for. A lock its
		// Locker's Close released is no deposed holder's: shutting down is no alert.
		lk.observe(pglock.EventFenceRefused, func(e *pglock.Event) { e.Err = err })
	}
	return err
}

// VerifyFenceGrace is how long past the lease's expiry a transaction fenced by VerifyFence may
// stay idle, or a statement in it run, before PostgreSQL ends it.
const VerifyFenceGrace = time.Second

// VerifyFence is Fence for a name and token known without the Lock, such as in a process the
// token was handed to. It bounds tx as Fence does, with VerifyFenceGrace for the margin.
func VerifyFence(ctx context.Context, tx pgx.Tx, name string, token int64) error {
	q, err := db.InTx(tx)
	if err != nil {
		return err
	}
	return fence(ctx, q, name, token, VerifyFenceGrace)
}

// VerifyFenceSQL is VerifyFence for a database/sql transaction, as Lock.FenceSQL is Fence.
func VerifyFenceSQL(ctx context.Context, tx *sql.Tx, name string, token int64) error {
	q, err := db.InSQLTx(tx)
	if err != nil {
		return err
	}
	return fence(ctx, q, name, token, VerifyFenceGrace)
}

func fence(ctx context.Context, q db.DBTX, name string, token int64, grace time.Duration) error {
	if err := pglock.ValidateName(name); err != nil {
		return err
	}
	_, err := db.New(q).FenceLock(ctx, db.FenceLockParams{LockName: name, FencingToken: token, GraceMs: grace.Milliseconds()})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errs.Errorf("%w: %q is not held with token %d", pglock.ErrLockLost, name, token)
	case err != nil:
		return errs.Errorf("verify fence of %q: %w", name, err)
	}
	return nil
}
