// Package ops is what operators read and do, for pglockctl and the console alike: one layer,
// so that a page and a command never disagree about what they show.
package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/tablelock"
)

// The locks an operator sees; the JSON field names are pglockctl list's, stable (see
// docs/pglockctl.md).
type (
	// Locks is a snapshot of the locks, as of Now by the database's clock.
	Locks struct {
		Now           time.Time      `json:"now"`
		TableLocks    []TableLock    `json:"table_locks"`
		AdvisoryLocks []AdvisoryLock `json:"advisory_locks"`
		MoreTable     bool           `json:"-"` // table locks past the page's Limit
	}
	// TableLock is a row of distributed_locks.
	TableLock struct {
		Name        string          `json:"name"`
		Holder      string          `json:"holder"`
		Instance    string          `json:"instance"`
		Token       int64           `json:"token"`
		AcquiredAt  time.Time       `json:"acquired_at"`
		ExpiresAt   time.Time       `json:"expires_at"`
		ExpiresInMs int64           `json:"expires_in_ms"`
		Expired     bool            `json:"expired"`
		Waiters     int64           `json:"waiters"`
		Metadata    json.RawMessage `json:"metadata"`
		// A semaphore's place: how many places it takes, and the key they count against
		// (absent for a table lock).
		Places int32   `json:"places,omitempty"`
		Key    *string `json:"semaphore_key,omitempty"`
	}
	// AdvisoryLock is an advisory lock held or awaited, from pg_locks.
	AdvisoryLock struct {
		Key             *int64    `json:"key"`  // null for a pair key
		Pair            *[2]int32 `json:"pair"` // null for a bigint key
		Name            string    `json:"name"`
		Mode            string    `json:"mode"`
		Granted         bool      `json:"granted"`
		WaitingMs       int64     `json:"waiting_ms"`
		PID             int32     `json:"pid"`
		ApplicationName string    `json:"application_name"`
		ClientAddr      string    `json:"client_addr"`
		SessionAgeMs    int64     `json:"session_age_ms"`
		BlockedBy       []int32   `json:"blocked_by"`
	}
)

// The kinds of lock ListLocks reads.
const (
	KindTable    = "table"
	KindAdvisory = "advisory"
	KindAll      = "all"
)

// containsPattern is a LIKE pattern for the text that contains s.
func containsPattern(s string) *string {
	p := "%" + likeEscaper.Replace(s) + "%"
	return &p
}

var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// Counts are what an overview shows besides locks.
type Counts struct {
	JobsEstimate int64 // the planner's estimate of the job records; -1 before the table was analyzed
}

// Count estimates what an overview shows besides locks, cheaply: a page that refreshes every
// few seconds must not count a table of millions.
func Count(ctx context.Context, pool *pgxpool.Pool) (Counts, error) {
	n, err := db.New(db.Translating(pool)).Counts(ctx)
	return Counts{JobsEstimate: n}, err
}

// LockCounts are the table locks' numbers, for an overview.
type LockCounts = db.LockCountsRow

// CountLocks counts the table locks, those expired and the live waiters, and finds the oldest
// holding, in one statement.
func CountLocks(ctx context.Context, pool *pgxpool.Pool) (LockCounts, error) {
	return db.New(db.Translating(pool)).LockCounts(ctx)
}

// LockFilter selects locks; every zero field selects all.
type LockFilter struct {
	Kind     string            // KindTable, KindAdvisory or KindAll (""); a table lock's
	Only     *string           // the table lock of this name alone
	Contains string            // names containing this (in the database, for table locks)
	Match    func(string) bool // names it accepts (in Go)
	After    string            // table locks after this name: keyset pagination
	Limit    int               // table locks at most; 0: no limit
}

// ListLocks reads the locks f selects, table locks in name order.
func ListLocks(ctx context.Context, pool *pgxpool.Pool, f LockFilter) (Locks, error) {
	match := f.Match
	if match == nil {
		match = func(string) bool { return true }
	}
	if strings.ContainsRune(f.Contains+f.After, 0) {
		return Locks{}, fmt.Errorf("%w: a filter holds a NUL character", pglock.ErrInvalidArgument)
	}
	q := db.New(db.Translating(pool))
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return Locks{}, err
	}
	out := Locks{Now: now, TableLocks: []TableLock{}, AdvisoryLocks: []AdvisoryLock{}}
	if f.Kind != KindAdvisory {
		params := db.ListTableLocksParams{LockName: f.Only, MaxRows: 1<<31 - 1}
		if f.Limit > 0 {
			params.MaxRows = int32(min(f.Limit, 1<<30)) + 1
		}
		if f.Contains != "" {
			params.NameLike = containsPattern(f.Contains)
		}
		if f.After != "" {
			params.After = &f.After
		}
		rows, err := q.ListTableLocks(ctx, params)
		if err != nil {
			return Locks{}, err
		}
		if f.Limit > 0 && len(rows) > f.Limit {
			rows, out.MoreTable = rows[:f.Limit], true
		}
		for _, r := range rows {
			if !match(r.LockName) {
				continue
			}
			lock := TableLock{
				Name: r.LockName, Holder: r.HolderID, Instance: r.Instance, Token: r.FencingToken,
				AcquiredAt: r.AcquiredAt, ExpiresAt: r.ExpiresAt, ExpiresInMs: r.ExpiresAt.Sub(now).Milliseconds(),
				Expired: !r.ExpiresAt.After(now), Waiters: r.Waiters, Metadata: r.Metadata,
			}
			if IsSemaphore(r.LockName) {
				lock.Places, lock.Key = r.Places, &r.SemaphoreKey
			}
			out.TableLocks = append(out.TableLocks, lock)
		}
	}
	if f.Kind != KindTable {
		locks, err := advisory.List(ctx, pool)
		if err != nil {
			return Locks{}, err
		}
		for _, l := range locks {
			name := l.Name
			if l.Namespace != "" {
				name = l.Namespace + "/" + l.Name
			}
			if !match(name) || !strings.Contains(name, f.Contains) {
				continue
			}
			lock := AdvisoryLock{
				Name: name, Mode: l.Mode, Granted: l.Granted, WaitingMs: l.Waited.Milliseconds(), PID: l.PID,
				ApplicationName: l.ApplicationName, ClientAddr: l.ClientAddr, SessionAgeMs: l.SessionAge.Milliseconds(),
				BlockedBy: l.BlockedBy,
			}
			if id, ok := l.Key.Int64(); ok {
				lock.Key = &id
			} else {
				ns, minor := l.Key.Pair()
				lock.Pair = &[2]int32{ns, minor}
			}
			if lock.BlockedBy == nil {
				lock.BlockedBy = []int32{}
			}
			out.AdvisoryLocks = append(out.AdvisoryLocks, lock)
		}
	}
	return out, nil
}

// Waiter is a place in a table lock's queue.
type Waiter = db.ListLockWaitersRow

// Lock reads the table lock name and its live waiters in queue order; pglock.ErrNotFound if
// nobody holds it and nobody waits for it. For a semaphore, by its queue's name or a place's,
// it reads every place held and the semaphore's waiters.
func Lock(ctx context.Context, pool *pgxpool.Pool, name string) (Locks, []Waiter, error) {
	if err := pglock.ValidateName(name); err != nil {
		return Locks{}, nil, err
	}
	queue, filter := name, LockFilter{Kind: KindTable, Only: &name}
	if q, ok := tablelock.SemaphoreQueue(name); ok {
		queue = q
	} else if strings.HasPrefix(name, tablelock.SemaphorePrefix) {
		filter = LockFilter{Kind: KindTable, Match: func(place string) bool { return strings.HasPrefix(place, name+"/") },
			Contains: name + "/"}
	}
	locks, err := ListLocks(ctx, pool, filter)
	if err != nil {
		return Locks{}, nil, err
	}
	waiters, err := db.New(db.Translating(pool)).ListLockWaiters(ctx, queue)
	if err != nil {
		return Locks{}, nil, err
	}
	if len(locks.TableLocks) == 0 && len(waiters) == 0 {
		return Locks{}, nil, fmt.Errorf("%w: nobody holds or waits for table lock %q", pglock.ErrNotFound, name)
	}
	return locks, waiters, nil
}

// IsSemaphore says whether name is a semaphore's queue or one of its places.
func IsSemaphore(name string) bool { return strings.HasPrefix(name, tablelock.SemaphorePrefix) }

// IsSemaphorePlace says whether name is one of a semaphore's places (not its queue).
func IsSemaphorePlace(name string) bool {
	_, ok := tablelock.SemaphoreQueue(name)
	return ok
}

// KeyShare is what one key of a semaphore holds and waits for.
type KeyShare struct {
	Key           string
	Holders       int
	Places        int // held
	Waiters       int
	WaitingPlaces int // wanted by the waiters
}

// Shares sums a semaphore's live places held and its waiters by key, in key order.
func Shares(held []TableLock, waiters []Waiter) []KeyShare {
	byKey := map[string]*KeyShare{}
	share := func(key string) *KeyShare {
		if byKey[key] == nil {
			byKey[key] = &KeyShare{Key: key}
		}
		return byKey[key]
	}
	for _, h := range held {
		if h.Expired || h.Key == nil {
			continue
		}
		s := share(*h.Key)
		s.Holders++
		s.Places += int(h.Places)
	}
	for _, w := range waiters {
		s := share(w.SemaphoreKey)
		s.Waiters++
		s.WaitingPlaces += int(w.Places)
	}
	out := make([]KeyShare, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b KeyShare) int { return strings.Compare(a.Key, b.Key) })
	return out
}
