package pglock

import (
	"context"
	"errors"
	"time"
)

// An Observer watches pglock's primitives, for metrics and traces (package otelpglock is one):
// each package's Config.Observer. pglock never blocks on it: Observe runs on a goroutine of
// its own, and a slow or panicking Observer delays no renewal, handoff or run.
type Observer interface {
	// Observe receives each event, one at a time, in the order they happened, on a goroutine
	// of pglock's. ctx is the operation's (for its values, such as a span: it may be done).
	// Events that find EventBuffer undelivered ones waiting are dropped and logged. A panic is
	// recovered and logged.
	Observe(ctx context.Context, e Event)

	// Begin is called on the goroutine about to run the caller's function for a primitive —
	// a job's attempt (EventJobRun), a cron run (EventCronRun) — before it starts, and returns
	// the context that function runs with (one carrying a span, say). The run's end is then
	// observed as an event of the same kind. A panic is recovered and logged, and ctx used.
	Begin(ctx context.Context, e Event) context.Context
}

// ObserverFunc is an Observer that is a function of the events; its Begin returns ctx as it is.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Begin returns ctx.
func (f ObserverFunc) Begin(ctx context.Context, _ Event) context.Context { return ctx }

// A LeadershipReader is an Observer that reads leadership when it exports, rather than from
// events alone: an Elector whose Observer is one registers with it for the whole of Run, so that
// a candidate that never led says so from the start of its campaign (package otelpglock's
// pglock.leader.is_leader is 0 for it, not absent). term is the Elector's Term; stop ends the
// registration.
type LeadershipReader interface {
	ReadLeadership(election string, term func() int64) (stop func())
}

// EventBuffer is how many events may wait for an Observer (per Locker, Deduper, Scheduler,
// Elector, Limiter or Session) before new ones are dropped.
const EventBuffer = 4096

// Event is one thing that happened to a primitive: the same shape for every package. The
// fields an event of a kind sets are listed with the kind; the others are zero.
type Event struct {
	Kind      EventKind
	Time      time.Time // when it happened, on this host's clock
	Primitive Primitive
	// Name is the lock's, semaphore's, advisory key's (as List shows it), schedule's,
	// election's or limiter's name; for a job, its scope.
	Name string
	// Key is a job's key or a rate-limit key.
	Key     string
	Outcome Outcome
	Cause   Cause // EventLost, EventLeader (Outcome OutcomeLost)
	Mode    Mode  // EventJobRun, EventJobDelivery: how the job ran; EventCronRun: the run's kind
	// Uniqueness is a job delivery's jobs.Mode, in the events of its delivery, run and lease:
	// "" for the default, "while_running", "per_period", "supersede" or "debounce".
	Uniqueness string

	Wait    time.Duration // acquisitions and rate-limit waits: how long the caller waited
	Held    time.Duration // EventReleased, EventLost, EventLeader: how long it was held
	Run     time.Duration // EventJobRun, EventCronRun: how long the function ran
	Lag     time.Duration // EventCronRun: Started − Scheduled, on the database's clock (the fire lag for ModeScheduled); EventRenewalLag: how far renewals are behind
	Vacancy time.Duration // EventLeader (OutcomeElected): time without a leader before, database clock
	Offset  time.Duration // EventClockOffset: the database's clock minus this host's

	// Token is the fencing token: a lock's, a semaphore place's, a leader's term, a job
	// attempt's or a cron run's.
	Token   int64
	Attempt int // EventJobRun, EventJobDelivery, EventCronRun: the attempt's number, from 1
	// Count is how many ticks an OutcomeMissed EventCronRun covers: a missed range is one
	// record (−1: too many to count); for EventRenewalLag, how many leases are held; for a
	// semaphore's EventAcquire (acquired), EventReleased and EventLost, the places taken; for
	// EventRateLimit, the events decided, the costs of every limit of the decision added up.
	Count int64

	// Scheduled and Started are a cron run's tick and start, on the database's clock.
	Scheduled, Started time.Time
	// ScheduleKind is a runtime schedule's kind (cron.Definition.Kind), in the events of its
	// runs and leases; "" for a schedule added in code. A runtime schedule's Name is not bounded
	// (a schedule per tenant, say): an adapter makes it an attribute only through a label.
	ScheduleKind string

	// Blocking tells an acquisition that waits its turn (Acquire) from a try (TryAcquire).
	Blocking bool

	Err error // what went wrong, for the outcomes and kinds that have one
}

// EventKind says what an Event reports.
type EventKind string

// The kinds of Event.
const (
	// EventAcquire: an acquisition (lock, semaphore place, advisory lock) ended. Outcome is
	// OutcomeAcquired, OutcomeNotAcquired, OutcomeTimeout, OutcomeCanceled or OutcomeError;
	// Wait, Blocking, Token when acquired, Err.
	EventAcquire EventKind = "acquire"
	// EventReleased: a held lock was released. Held, Token.
	EventReleased EventKind = "released"
	// EventLost: a held lock was lost. Cause, Held, Token, Err.
	EventLost EventKind = "lost"
	// EventRenewFailed: a renewal of a lease (lock, job attempt, cron run) failed and will be
	// retried until the lease's deadline. Token, Err.
	EventRenewFailed EventKind = "renew_failed"
	// EventRenewalLag: the renewals of the leases an object holds are more than half a heartbeat
	// behind (Lag: how long the longest-waiting lease has waited for one since its heartbeat
	// was due), told at every renewal tick while they stay so, and once when they have caught
	// up (Outcome OutcomeAcquired then; OutcomeError while behind). New acquisitions fail with
	// ErrSaturated meanwhile. Count: the leases held.
	EventRenewalLag EventKind = "renewal_lag"
	// EventFenceRefused: Fence refused a holder whose token is no longer current, whether its
	// loss was noticed before or by that Fence. Token, Err.
	EventFenceRefused EventKind = "fence_refused"
	// EventJobRun: an attempt ran the job's function (Begin was called before it). Outcome
	// is OutcomeRan, OutcomeFailed or OutcomeSuperseded; Mode, Uniqueness, Run, Attempt, Token,
	// Err.
	EventJobRun EventKind = "job_run"
	// EventJobDelivery: a delivery (Run, Do, RunTx, Debounce) ended. Outcome is OutcomeRan,
	// OutcomeAlreadyDone, OutcomeInProgress, OutcomeFailed, OutcomeGaveUp,
	// OutcomeFingerprintMismatch, OutcomeSuperseded, OutcomeDebounced or OutcomeError; Mode,
	// Uniqueness, Attempt (for a debounced delivery: the pending cycle's deliveries so far), Err.
	EventJobDelivery EventKind = "job_delivery"
	// EventCronRun: a cron run was accounted for by this instance — run (Begin was called
	// before it), or recorded as skipped, missed or abandoned, each once in the fleet.
	// Outcome is the run's status (OutcomeRan, OutcomeFailed, OutcomeSkipped, OutcomeMissed,
	// OutcomeAbandoned, OutcomeCanceled), or OutcomeNotRecorded for a run that ended after
	// another instance had recorded it abandoned (that instance tells it); Mode, Scheduled,
	// Started, Lag and Run where it ran, Attempt, Token, Err.
	EventCronRun EventKind = "cron_run"
	// EventClockOffset: a scheduler measured its host's clock against the database's. Offset.
	EventClockOffset EventKind = "clock_offset"
	// EventLeader: this Elector's leadership began (OutcomeElected: Vacancy) or ended
	// (OutcomeResigned, or OutcomeLost with its Cause: Held, the tenure). Token is the term.
	EventLeader EventKind = "leader"
	// EventRateLimit: a limiter decided. Outcome is OutcomeAllowed or OutcomeDenied (Wait
	// with its wait, which ended denied only when it could not be granted in time), or, for a
	// Wait that failed, OutcomeCanceled, OutcomeTimeout or OutcomeError.
	EventRateLimit EventKind = "ratelimit"
)

// Primitive says what kind of thing an Event is about.
type Primitive string

// The primitives.
const (
	PrimitiveLock      Primitive = "lock"      // a tablelock lock
	PrimitiveSemaphore Primitive = "semaphore" // a place of a tablelock semaphore
	PrimitiveAdvisory  Primitive = "advisory"  // an advisory lock of a Session
	PrimitiveJob       Primitive = "job"
	PrimitiveCron      Primitive = "cron"
	PrimitiveLeader    Primitive = "leader"
	PrimitiveRateLimit Primitive = "ratelimit"
)

// Outcome is how an operation ended, as an Event reports it.
type Outcome string

// The outcomes.
const (
	OutcomeAcquired    Outcome = "acquired"
	OutcomeNotAcquired Outcome = "not_acquired" // a try that found it held
	OutcomeTimeout     Outcome = "timeout"
	OutcomeCanceled    Outcome = "canceled"
	OutcomeError       Outcome = "error"

	OutcomeRan                 Outcome = "ran"
	OutcomeAlreadyDone         Outcome = "already_done"
	OutcomeInProgress          Outcome = "in_progress" // running elsewhere
	OutcomeFailed              Outcome = "failed"
	OutcomeGaveUp              Outcome = "gave_up"
	OutcomeFingerprintMismatch Outcome = "fingerprint_mismatch"
	OutcomeSuperseded          Outcome = "superseded" // a newer delivery took the key over (jobs.Supersede)
	OutcomeDebounced           Outcome = "debounced"  // a debounced delivery recorded pending (jobs.Debounce)

	OutcomeSkipped     Outcome = "skipped"
	OutcomeMissed      Outcome = "missed"
	OutcomeAbandoned   Outcome = "abandoned"
	OutcomeNotRecorded Outcome = "not_recorded" // a run whose outcome another instance's record overrode

	OutcomeElected  Outcome = "elected"
	OutcomeResigned Outcome = "resigned"
	OutcomeLost     Outcome = "lost"

	OutcomeAllowed Outcome = "allowed"
	OutcomeDenied  Outcome = "denied"
)

// Cause says why something held was lost.
type Cause string

// The causes of a loss.
const (
	// CauseRenewalFailed: no renewal got through before the lease's deadline.
	CauseRenewalFailed Cause = "renewal_failed"
	// CauseForceReleased: the row was gone or another's (pglockctl release, ForceResign, an
	// expiry taken over while this holder was cut off).
	CauseForceReleased Cause = "force_released"
	// CauseConnectionLost: the connection holding an advisory lock died.
	CauseConnectionLost Cause = "connection_lost"
	// CauseExpired: the lease ran out with no heartbeat to renew it.
	CauseExpired Cause = "expired"
	// CauseClosed: the Locker (or Session) was closed while it was held.
	CauseClosed Cause = "closed"
	// CauseSuperseded: a newer delivery of a job's key took it over (jobs.Supersede).
	CauseSuperseded Cause = "superseded"
)

// CauseOf returns why a lease was lost (a table lock's, a semaphore place's, a leader's term,
// a job attempt's or a cron run's), from the error its Err or its loss gave; "" for any other
// error.
func CauseOf(err error) Cause {
	var lost interface{ LossCause() Cause }
	if errors.As(err, &lost) {
		return lost.LossCause()
	}
	return ""
}

// Mode says how a job delivery ran, or what kind of run a cron run is.
type Mode string

// The modes.
const (
	ModeRun   Mode = "run"   // a job's Run and Do: fn under a renewed lease
	ModeRunTx Mode = "runtx" // a job's RunTx: fn inside the claim's transaction

	ModeScheduled Mode = "scheduled" // a cron tick run on time
	ModeCatchUp   Mode = "catch_up"  // a missed tick run late, as the catch-up policy says
	ModeManual    Mode = "manual"    // a cron run triggered by hand
	ModeBackfill  Mode = "backfill"  // a past tick queued by Backfill
)
