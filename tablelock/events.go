package tablelock

import (
	"fmt"
	"time"

	"github.com/pglock/pglock"
)

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event.
const (
	EventKindAcquired      EventKind = iota + 1 // a lock was acquired; Wait is how long Acquire waited
	EventKindLocked                             // TryAcquire found the lock held
	EventKindReleased                           // a lock was released; Held is how long it was held
	EventKindLost                               // a held lock was lost; Err says why
	EventKindRenewFailed                        // a renewal failed and will be retried; Err says why
	EventKindWaitAbandoned                      // Acquire stopped waiting; Err says why
)

func (k EventKind) String() string {
	switch k {
	case EventKindAcquired:
		return "acquired"
	case EventKindLocked:
		return "locked"
	case EventKindReleased:
		return "released"
	case EventKindLost:
		return "lost"
	case EventKindRenewFailed:
		return "renew_failed"
	case EventKindWaitAbandoned:
		return "wait_abandoned"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is what Config.OnEvent receives: enough to drive metrics for acquire latency, waits,
// held locks and losses.
type Event struct {
	Kind  EventKind
	Name  string
	Token int64
	// Latency is the round trip behind the event, when there was one; for a lock handed over,
	// the time since the start of the poll that queued for it.
	Latency time.Duration
	Wait    time.Duration // EventKindAcquired, EventKindWaitAbandoned: time spent waiting
	Held    time.Duration // EventKindReleased, EventKindLost: time the lock was held
	Err     error         // EventKindLost, EventKindRenewFailed, EventKindWaitAbandoned
}

// Stats is a snapshot of a Locker.
type Stats struct {
	Held    int // locks held
	Waiting int // Acquire calls waiting
}

// LockedError is the error of an acquisition that found the lock held. It matches
// pglock.ErrLocked.
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
