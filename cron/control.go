package cron

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// Status is where a run stands.
type Status string

const (
	StatusPending   Status = "pending"   // waiting for its turn (buffered, caught up, manual, backfilled)
	StatusRunning   Status = "running"   // under way, under a lease
	StatusRan       Status = "ran"       // fn returned nil
	StatusFailed    Status = "failed"    // fn returned an error or panicked
	StatusSkipped   Status = "skipped"   // not run: the overlap policy, or the schedule was paused
	StatusMissed    Status = "missed"    // not run: no instance claimed it in time (a range of ticks)
	StatusAbandoned Status = "abandoned" // its instance vanished: the lease expired
	StatusCanceled  Status = "canceled"  // replaced by a newer run, or canceled by Stop
)

// OrphanedAfter is how long a schedule may go unregistered by every instance before List shows
// it as orphaned. Instances record that they have their schedules every 30 s.
const OrphanedAfter = 5 * time.Minute

// MaxBackfill is the most ticks one Backfill queues.
const MaxBackfill = 10000

// Pause stops every instance from starting the schedule's ticks from its next tick on: they
// are recorded skipped, with note, until Resume. Manual and backfilled runs still run. An
// unknown name gets an error matching [pglock.ErrNotFound].
func Pause(ctx context.Context, pool *pgxpool.Pool, name, note, by string) error {
	q, err := queries(pool)
	if err != nil {
		return err
	}
	if err := q.PauseCronSchedule(ctx, db.PauseCronScheduleParams{Name: name, Note: &note, PausedBy: &by}); err != nil {
		return errs.Errorf("pause %q: %w", name, err)
	}
	return nil
}

// Resume lets the schedule's ticks run again from its next tick. Ticks that came while it was
// paused are not run.
func Resume(ctx context.Context, pool *pgxpool.Pool, name string) error {
	q, err := queries(pool)
	if err != nil {
		return err
	}
	if err := q.ResumeCronSchedule(ctx, name); err != nil {
		return errs.Errorf("resume %q: %w", name, err)
	}
	return nil
}

// Trigger asks for a manual run of the schedule, recorded as such (Run.Kind RunKindManual), which
// an instance that has the schedule starts at once, or once a running run ends unless the
// schedule allows overlap; it runs even while the schedule is paused. It is never one of the
// schedule's ticks. It returns the run's id.
func Trigger(ctx context.Context, pool *pgxpool.Pool, name, by string) (int64, error) {
	q, err := queries(pool)
	if err != nil {
		return 0, err
	}
	id, err := q.TriggerCronSchedule(ctx, db.TriggerCronScheduleParams{Name: name, RequestedBy: &by})
	if err != nil {
		return 0, errs.Errorf("trigger %q: %w", name, err)
	}
	return id, nil
}

// Backfill queues each tick of the schedule from from to to (both included, both past) that
// has not run, failed, or is not already running or queued; instances run them oldest first,
// one at a time unless the schedule allows overlap. It returns how many it queued (at most
// MaxBackfill ticks may be asked for at once).
func Backfill(ctx context.Context, pool *pgxpool.Pool, name string, from, to time.Time, by string) (int, error) {
	q, err := queries(pool)
	if err != nil {
		return 0, err
	}
	return backfill(ctx, q, name, from, to, by)
}

// PreviewBackfill returns how many ticks Backfill would queue now, and queues none: it backfills
// in a transaction that it rolls back.
func PreviewBackfill(ctx context.Context, pool *pgxpool.Pool, name string, from, to time.Time) (n int, err error) {
	err = withQueries(ctx, pool, true, func(q *db.Queries) error {
		n, err = backfill(ctx, q, name, from, to, "preview")
		return err
	})
	return n, err
}

func backfill(ctx context.Context, q *db.Queries, name string, from, to time.Time, by string) (int, error) {
	if to.Before(from) {
		return 0, errs.Errorf("%w: backfill %q: from %s is after to %s", pglock.ErrInvalidArgument, name, from, to)
	}
	sched, err := readSchedule(ctx, q, name)
	if err != nil {
		return 0, errs.Errorf("backfill %q: %w", name, err)
	}
	var ticks []time.Time
	for at := sched.next(from.Add(-time.Nanosecond)); !at.IsZero() && !at.After(to); at = sched.next(at) {
		if len(ticks) == MaxBackfill {
			return 0, errs.Errorf("%w: backfill %q: more than %d ticks from %s to %s", pglock.ErrInvalidArgument,
				name, MaxBackfill, from, to)
		}
		ticks = append(ticks, at)
	}
	n, err := q.BackfillCronSchedule(ctx, db.BackfillCronScheduleParams{Name: name, Ticks: ticks, RequestedBy: &by})
	if err != nil {
		return 0, errs.Errorf("backfill %q: %w", name, err)
	}
	return int(n), nil
}

// ScheduleInfo is a schedule as List reports it.
type ScheduleInfo struct {
	Name, Spec, TimeZone string
	Overlap              Overlap
	CatchUp              CatchUp
	CatchUpWindow        time.Duration
	Retention            time.Duration
	MaxRuns              int
	Paused               bool
	PauseNote, PausedBy  string
	PausedAt             time.Time
	LastInstance         string      // the last instance to register it (or, a runtime one, to handle it)
	LastSeenAt           time.Time   // and when
	Orphaned             bool        // no instance has registered it for OrphanedAfter (one added in code)
	Next                 []time.Time // the next five fire times; none if the spec no longer parses
	LastRun              *RunRecord  // the latest run that is not pending; nil if none

	// A runtime schedule's (Define): its kind ("" for one added in code) and arguments, and
	// whether no instance has handled it for OrphanedAfter, or ever.
	Kind      string
	Args      json.RawMessage
	Unhandled bool
	Revision  int64 // of its definition
	// TTL and Timeout of a runtime schedule (one added in code keeps them in its code).
	TTL, Timeout time.Duration
	// The spec extras (Options), and where the schedule stands with them.
	Jitter             time.Duration
	Start, End         time.Time
	RunLimit           int
	RunsStarted        int64 // runs of its ticks so far, counted while it has a run limit
	Finished           bool  // its run limit is reached, or its End has passed
	PauseAfterFailures int
	FailuresInRow      int // failed runs since the last that ran
	// The last change of a runtime schedule's definition: by whom, when, and why.
	ChangedBy, ChangeNote string
	ChangedAt             time.Time
}

// Definition is the runtime schedule's definition, for Update.
func (i ScheduleInfo) Definition() (Definition, error) {
	loc, err := time.LoadLocation(i.TimeZone)
	if err != nil {
		return Definition{}, errs.Errorf("%w: time zone %q: %w", pglock.ErrInvalidSpec, i.TimeZone, err)
	}
	return Definition{Name: i.Name, Kind: i.Kind, Spec: i.Spec, Args: i.Args, Options: &Options{
		Location: loc, Overlap: i.Overlap, CatchUp: i.CatchUp, CatchUpWindow: i.CatchUpWindow, Retention: i.Retention,
		MaxRuns: i.MaxRuns, TTL: i.TTL, Timeout: i.Timeout, Jitter: i.Jitter, Start: i.Start, End: i.End,
		RunLimit: i.RunLimit, PauseAfterFailures: i.PauseAfterFailures,
	}}, nil
}

// RunRecord is one row of a schedule's history.
type RunRecord struct {
	ID            int64
	Schedule      string
	ScheduledTime time.Time
	Kind          RunKind
	Status        Status
	Attempt       int
	MissedUntil   time.Time // a missed record stands for the ticks from ScheduledTime to MissedUntil
	MissedCount   int64     // how many; -1 when too many to count
	RequestedBy   string
	Instance      string
	Token         int64
	StartedAt     time.Time
	FinishedAt    time.Time
	Duration      time.Duration
	Error         string
}

// List returns every schedule, with its next five fire times and last run.
func List(ctx context.Context, pool *pgxpool.Pool) ([]ScheduleInfo, error) {
	q, err := queries(pool)
	if err != nil {
		return nil, err
	}
	rows, err := q.ListCronSchedules(ctx)
	if err != nil {
		return nil, errs.Errorf("list: %w", err)
	}
	list := make([]ScheduleInfo, 0, len(rows))
	for _, row := range rows {
		r := row.PglockCronSchedule
		seen := r.LastSeenAt != nil && row.DbNow.Sub(*r.LastSeenAt) <= OrphanedAfter
		ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
		info := ScheduleInfo{
			Name: r.Name, Spec: r.Spec, TimeZone: r.TimeZone, Overlap: Overlap(r.Overlap), CatchUp: CatchUp(r.CatchUp),
			Paused: r.Paused, PauseNote: db.Deref(r.PauseNote), PausedBy: db.Deref(r.PausedBy), PausedAt: db.Deref(r.PausedAt),
			CatchUpWindow: ms(r.CatchUpWindowMs), Retention: ms(r.KeepForMs), MaxRuns: int(r.KeepRuns),
			LastInstance: db.Deref(r.LastInstance), LastSeenAt: db.Deref(r.LastSeenAt),
			Orphaned: r.Kind == nil && !seen, Unhandled: r.Kind != nil && !seen,
			Kind: db.Deref(r.Kind), Args: r.Args, Revision: r.Revision, TTL: ms(db.Deref(r.TtlMs)), Timeout: ms(db.Deref(r.TimeoutMs)),
			Jitter: ms(r.JitterMs), Start: db.Deref(r.StartsAt), End: db.Deref(r.EndsAt), RunLimit: int(db.Deref(r.RunLimit)),
			RunsStarted: r.RunsStarted, PauseAfterFailures: int(db.Deref(r.PauseAfterFailures)), FailuresInRow: int(r.FailuresInRow),
			Finished:  r.RunLimit != nil && r.RunsStarted >= int64(*r.RunLimit) || r.EndsAt != nil && row.DbNow.After(*r.EndsAt),
			ChangedBy: db.Deref(row.ChangedBy), ChangeNote: db.Deref(row.ChangeNote), ChangedAt: db.Deref(row.ChangedAt),
		}
		if sched, err := storedSchedule(r); err == nil && !info.Finished {
			for at := row.DbNow; len(info.Next) < 5; {
				if at = sched.next(at); at.IsZero() {
					break
				}
				info.Next = append(info.Next, at.Add(jitterOf(r.Name, at, info.Jitter)))
			}
		}
		if row.LastRunID != nil {
			last := runRecord(db.PglockCronRun{
				ID: *row.LastRunID, Schedule: r.Name, ScheduledTime: db.Deref(row.LastScheduledTime), Kind: db.Deref(row.LastKind),
				Status: db.Deref(row.LastStatus), Attempt: db.Deref(row.LastAttempt), Instance: row.LastInstanceRun,
				FencingToken: row.LastToken, StartedAt: row.LastStartedAt, FinishedAt: row.LastFinishedAt, Error: row.LastError,
			})
			info.LastRun = &last
		}
		list = append(list, info)
	}
	return list, nil
}

// History returns the schedule's runs, newest tick first, at most limit of them.
func History(ctx context.Context, pool *pgxpool.Pool, name string, limit int) ([]RunRecord, error) {
	return history(ctx, pool, name, nil, limit)
}

// HistoryBefore is the page of History after the run last, the oldest of the page before:
// the runs of older ticks (or of the same tick, created before it), newest first.
func HistoryBefore(ctx context.Context, pool *pgxpool.Pool, name string, last RunRecord, limit int) ([]RunRecord, error) {
	return history(ctx, pool, name, &last, limit)
}

func history(ctx context.Context, pool *pgxpool.Pool, name string, before *RunRecord, limit int) ([]RunRecord, error) {
	q, err := queries(pool)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > 1<<31-1 {
		return nil, errs.Errorf("%w: history limit %d must be positive", pglock.ErrInvalidArgument, limit)
	}
	params := db.CronHistoryParams{Schedule: name, MaxRows: int32(limit)}
	if before != nil {
		params.BeforeTime, params.BeforeID = &before.ScheduledTime, &before.ID
	}
	rows, err := q.CronHistory(ctx, params)
	if err != nil {
		return nil, errs.Errorf("history of %q: %w", name, err)
	}
	if len(rows) == 0 { // no runs yet, or no such schedule: only the second is an error
		if _, err := q.GetCronSchedule(ctx, name); err != nil {
			return nil, errs.Errorf("history of %q: %w", name, notFound(err))
		}
	}
	list := make([]RunRecord, len(rows))
	for i, r := range rows {
		list[i] = runRecord(r)
	}
	return list, nil
}

func runRecord(r db.PglockCronRun) RunRecord {
	rec := RunRecord{
		ID: r.ID, Schedule: r.Schedule, ScheduledTime: r.ScheduledTime, Kind: RunKind(r.Kind), Status: Status(r.Status),
		Attempt: int(r.Attempt), MissedUntil: db.Deref(r.MissedUntil), RequestedBy: db.Deref(r.RequestedBy),
		Instance: db.Deref(r.Instance), Token: db.Deref(r.FencingToken), StartedAt: db.Deref(r.StartedAt),
		FinishedAt: db.Deref(r.FinishedAt), Error: db.Deref(r.Error),
	}
	if r.Status == string(StatusMissed) {
		rec.MissedCount = -1
		if r.MissedCount != nil {
			rec.MissedCount = *r.MissedCount
		}
	}
	if r.StartedAt != nil && r.FinishedAt != nil {
		rec.Duration = r.FinishedAt.Sub(*r.StartedAt)
	}
	return rec
}

func queries(pool *pgxpool.Pool) (*db.Queries, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	return db.New(db.Translating(pool)), nil
}

// readSchedule parses a schedule's spec as its instances do.
func readSchedule(ctx context.Context, q *db.Queries, name string) (schedule, error) {
	row, err := q.GetCronSchedule(ctx, name)
	if err != nil {
		return nil, notFound(err)
	}
	return storedSchedule(row)
}

// storedSchedule is a schedule's ticks as its row defines them, within its bounds.
func storedSchedule(r db.PglockCronSchedule) (schedule, error) {
	opts, err := optionsOf(r)
	if err != nil {
		return nil, err
	}
	set, loc, err := opts.settings()
	if err != nil {
		return nil, err
	}
	// Not compile: a jitter its ticks leave no room for does not change which ticks it has.
	sched, _, err := parseSpec(r.Spec, loc)
	if err != nil {
		return nil, err
	}
	return set.bound(sched), nil
}

func notFound(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return errs.Errorf("%w: no such schedule", pglock.ErrNotFound)
	}
	return err
}

// Collect deletes run history past each schedule's retention (Options.Retention and MaxRuns)
// and returns how many runs went. Schedulers do it every minute; pglockctl gc does it too.
func Collect(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	q, err := queries(pool)
	if err != nil {
		return 0, err
	}
	n, err := q.CollectCronRuns(ctx)
	if err != nil {
		return 0, errs.Errorf("collect: %w", err)
	}
	return int(n), nil
}
