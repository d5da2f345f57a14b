package advisory

import (
	"context"
	"sync"
	"time"
	"weak"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// LockInfo is one advisory lock held or awaited in the database, as List reports it.
type LockInfo struct {
	Key             Key           // an Int64Key or a PairKey
	Namespace, Name string        // the registered name behind the key, if any
	Mode            string        // "exclusive" or "shared"
	Granted         bool          // held, or else awaited
	Waited          time.Duration // how long it has been awaited; 0 when granted
	PID             int32         // the backend holding or awaiting it
	ApplicationName string
	ClientAddr      string        // empty for a Unix socket, or a session the caller may not see
	SessionAge      time.Duration // since the backend started; -1 for a session the caller may not see
	BlockedBy       []int32       // for an awaited lock, the pids it waits for
}

// List returns every advisory lock held or awaited in the pool's database, held ones first.
// Seeing other roles' sessions takes the pg_read_all_stats role.
func List(ctx context.Context, pool *pgxpool.Pool) ([]LockInfo, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	rows, err := db.New(db.Translating(pool)).AdvisoryLocks(ctx)
	if err != nil {
		return nil, errs.Errorf("list advisory locks: %w", err)
	}
	locks := make([]LockInfo, len(rows))
	for i, r := range rows {
		key := Int64Key(r.LockKey)
		if r.Pair {
			key = PairKey(r.PairNamespace, r.PairID)
		}
		locks[i] = LockInfo{
			Key: key, Namespace: r.Namespace, Name: r.Name, Mode: r.Mode, Granted: r.Granted,
			Waited: time.Duration(r.WaitedMs) * time.Millisecond, PID: r.Pid,
			ApplicationName: r.ApplicationName, ClientAddr: r.ClientAddr,
			SessionAge: time.Duration(r.SessionAgeMs) * time.Millisecond, BlockedBy: r.BlockedBy,
		}
		if r.SessionAgeMs < 0 {
			locks[i].SessionAge = -1
		}
	}
	return locks, nil
}

// Register records the name behind a string key in the database (once per pool in this
// process), so that List and pglockctl can show it. Keys made from numbers have no name.
func Register(ctx context.Context, pool *pgxpool.Pool, key Key) error {
	if pool == nil {
		return errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	return register(ctx, pool, key)
}

// registered remembers, per pool, the keys this process registered. The pool is held weakly,
// so a closed pool can be freed.
var registered sync.Map // of registration

type registration struct {
	pool weak.Pointer[pgxpool.Pool]
	id   int64
}

func register(ctx context.Context, pool *pgxpool.Pool, key Key) error {
	if key.err != nil {
		return key.err
	}
	if key.name == "" {
		return nil
	}
	r := registration{pool: weak.Make(pool), id: key.id}
	if _, ok := registered.Load(r); ok {
		return nil
	}
	if err := db.New(db.Translating(pool)).RegisterAdvisoryName(ctx, db.RegisterAdvisoryNameParams{Name: key.name, Namespace: key.namespace}); err != nil {
		return errs.Errorf("register %s: %w", key, err)
	}
	registered.Store(r, true)
	return nil
}
