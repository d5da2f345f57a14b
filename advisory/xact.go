package advisory

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// XactLock waits for the exclusive lock on key for the rest of tx: it is released when tx
// commits or rolls back, and cannot be released before. For a wait limit, use a ctx deadline
// or SET LOCAL lock_timeout in tx; either way the error matches [pglock.ErrLockTimeout].
func XactLock(ctx context.Context, tx pgx.Tx, key Key) error {
	return xactWait(ctx, inTx(tx), key, false)
}

// RXactLock waits for the shared lock on key for the rest of tx, as XactLock does.
func RXactLock(ctx context.Context, tx pgx.Tx, key Key) error {
	return xactWait(ctx, inTx(tx), key, true)
}

// TryXactLock takes the exclusive lock on key for the rest of tx if it is free, else returns
// an error matching [pglock.ErrLocked].
func TryXactLock(ctx context.Context, tx pgx.Tx, key Key) error {
	return xactTry(ctx, inTx(tx), key, false)
}

// TryRXactLock takes the shared lock on key for the rest of tx, as TryXactLock does.
func TryRXactLock(ctx context.Context, tx pgx.Tx, key Key) error {
	return xactTry(ctx, inTx(tx), key, true)
}

// XactLockSQL, RXactLockSQL, TryXactLockSQL and TryRXactLockSQL are XactLock, RXactLock,
// TryXactLock and TryRXactLock for a database/sql transaction, of any PostgreSQL driver
// (pgx's stdlib, lib/pq): GORM's, sqlx's, ent's or bun's, say.
func XactLockSQL(ctx context.Context, tx *sql.Tx, key Key) error {
	return xactWait(ctx, inSQLTx(tx), key, false)
}

// RXactLockSQL is RXactLock for a database/sql transaction.
func RXactLockSQL(ctx context.Context, tx *sql.Tx, key Key) error {
	return xactWait(ctx, inSQLTx(tx), key, true)
}

// TryXactLockSQL is TryXactLock for a database/sql transaction.
func TryXactLockSQL(ctx context.Context, tx *sql.Tx, key Key) error {
	return xactTry(ctx, inSQLTx(tx), key, false)
}

// TryRXactLockSQL is TryRXactLock for a database/sql transaction.
func TryRXactLockSQL(ctx context.Context, tx *sql.Tx, key Key) error {
	return xactTry(ctx, inSQLTx(tx), key, true)
}

// inTx and inSQLTx give xactWait and xactTry the caller's transaction, or the error refusing it.
func inTx(tx pgx.Tx) func() (db.DBTX, error) { return func() (db.DBTX, error) { return db.InTx(tx) } }
func inSQLTx(tx *sql.Tx) func() (db.DBTX, error) {
	return func() (db.DBTX, error) { return db.InSQLTx(tx) }
}

// XactOptions configure WithXactLock. A nil *XactOptions means the defaults.
type XactOptions struct {
	// IdleTimeout, when positive, has PostgreSQL end the transaction's session if it stays idle
	// that long (idle_in_transaction_session_timeout, for this transaction only): a client that
	// vanishes mid-transaction, a frozen VM or a silent partition, then holds the lock for that
	// long, not until TCP gives up (hours, by default). Off by default, because fn may
	// legitimately hold the lock while it works elsewhere: set it above the longest time fn
	// goes without a statement. Whole milliseconds, rounded up; at most about 24.8 days
	// (PostgreSQL's limit). Default: 0, no bound.
	IdleTimeout time.Duration
}

// maxIdleTimeout is the largest idle_in_transaction_session_timeout PostgreSQL takes.
const maxIdleTimeout = math.MaxInt32 * time.Millisecond

// WithXactLock begins a transaction on pool, waits for the exclusive lock on key in it, runs
// fn, and commits, or rolls back if fn (or anything else) fails, returning that error.
func WithXactLock(ctx context.Context, pool *pgxpool.Pool, key Key, opts *XactOptions, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if pool == nil {
		return errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	if _, err := key.lock(false); err != nil {
		return err
	}
	var idle time.Duration
	if opts != nil {
		idle = opts.IdleTimeout
	}
	if idle < 0 || idle > maxIdleTimeout {
		return errs.Errorf("%w: XactOptions.IdleTimeout %s is outside [0, %s]", pglock.ErrInvalidArgument, idle, maxIdleTimeout)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if idle > 0 {
			ms := (idle + time.Millisecond - 1).Milliseconds()
			if err := db.New(db.Translating(tx)).BoundIdleInTransaction(ctx, ms); err != nil {
				return errs.Errorf("%s: bound the transaction's idle time: %w", key, err)
			}
		}
		if err := XactLock(ctx, tx, key); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// WithLock opens a Session on pool, waits for the exclusive lock on key, runs fn, unlocks and
// closes the session. fn's context is canceled, with cause [pglock.ErrLockLost], if the session
// is lost meanwhile; WithLock then returns an error matching [pglock.ErrLockLost] too.
func WithLock(ctx context.Context, pool *pgxpool.Pool, key Key, cfg *Config, fn func(ctx context.Context) error) (err error) {
	if _, err := key.lock(false); err != nil {
		return err
	}
	s, err := Open(ctx, pool, cfg)
	if err != nil {
		return err
	}
	cleanup := context.WithoutCancel(ctx)
	defer func() { err = errors.Join(err, s.Close(cleanup)) }()
	if err := s.Lock(ctx, key); err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.lostCtx, func() { cancel(s.Err()) })
	defer stop()
	fnErr := fn(fnCtx)
	if lost := s.Err(); lost != nil {
		return errors.Join(fnErr, lost)
	}
	return errors.Join(fnErr, s.Unlock(cleanup, key))
}

func xactWait(ctx context.Context, in func() (db.DBTX, error), key Key, shared bool) error {
	q, id, err := xactBegin(in, key, shared)
	if err != nil {
		return err
	}
	if err := db.New(q).AdvisoryXactLock(ctx, db.AdvisoryXactLockParams(id.params())); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errs.Errorf("%s: %w: %w", key, pglock.ErrLockTimeout, err)
		}
		return errs.Errorf("%s: %w", key, err)
	}
	return nil
}

func xactTry(ctx context.Context, in func() (db.DBTX, error), key Key, shared bool) error {
	q, id, err := xactBegin(in, key, shared)
	if err != nil {
		return err
	}
	acquired, err := db.New(q).AdvisoryTryXactLock(ctx, db.AdvisoryTryXactLockParams(id.params()))
	if err != nil {
		return errs.Errorf("%s: %w", key, err)
	}
	if !acquired {
		return errs.Errorf("%s: %w", key, pglock.ErrLocked)
	}
	return nil
}

func xactBegin(in func() (db.DBTX, error), key Key, shared bool) (db.DBTX, lockID, error) {
	q, err := in()
	if err != nil {
		return nil, lockID{}, err
	}
	id, err := key.lock(shared)
	return q, id, err
}
