package tablelock

import (
	"fmt"
	"time"

	"github.com/pglock/pglock"
)

// Stats is a snapshot of a Locker.
type Stats struct {
	Held    int // locks held
	Waiting int // Acquire calls waiting
	// RenewalLag is how far the renewals of the locks held are behind: how long the lock that
	// waited longest for a renewal to get through had waited since its heartbeat was due (a few
	// milliseconds normally). Past half a heartbeat, Saturated is true and acquisitions fail
	// with pglock.ErrSaturated until the renewals catch up.
	RenewalLag time.Duration
	Saturated  bool
}

// LockedError is the error of an acquisition that found the lock held. It matches
// [pglock.ErrLocked].
type LockedError struct {
	Name      string
	Holder    string         // the holder's id; for a free lock kept for a waiter, the waiter's
	Instance  string         // the holder's app@host:pid
	Metadata  map[string]any // the holder's metadata
	ExpiresAt time.Time      // when the holder's lease ends, by the database's clock
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("pglock: lock %q is held by %s (%s) until %s", e.Name, e.Holder, e.Instance,
		e.ExpiresAt.Format(time.RFC3339Nano))
}

func (e *LockedError) Unwrap() error { return pglock.ErrLocked }
