package cron

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
func PreviewBackfill(ctx context.Context, pool *pgxpool.Pool, name string, from, to time.Time) (int, error) {
	if pool == nil {
		return 0, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, errs.Errorf("preview backfill %q: %w", name, db.Translate(err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return backfill(ctx, db.New(db.Translating(tx)), name, from, to, "preview")
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
	LastInstance         string      // the last instance to register it
	LastSeenAt           time.Time   // and when
	Orphaned             bool        // no instance has registered it for OrphanedAfter
	Next                 []time.Time // the next five fire times; none if the spec no longer parses
	LastRun              *RunRecord  // the latest run that is not pending; nil if none
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
	for _, r := range rows {
		info := ScheduleInfo{
			Name: r.Name, Spec: r.Spec, TimeZone: r.TimeZone, Overlap: Overlap(r.Overlap), CatchUp: CatchUp(r.CatchUp),
			Paused: r.Paused, PauseNote: db.Deref(r.PauseNote), PausedBy: db.Deref(r.PausedBy), PausedAt: db.Deref(r.PausedAt),
			CatchUpWindow: time.Duration(r.CatchUpWindowMs) * time.Millisecond, Retention: time.Duration(r.KeepForMs) * time.Millisecond,
			MaxRuns:      int(r.KeepRuns),
			LastInstance: r.LastInstance, LastSeenAt: r.LastSeenAt, Orphaned: r.DbNow.Sub(r.LastSeenAt) > OrphanedAfter,
		}
		if sched, err := parseStored(r.Spec, r.TimeZone); err == nil {
			for at := r.DbNow; len(info.Next) < 5; {
				if at = sched.next(at); at.IsZero() {
					break
				}
				info.Next = append(info.Next, at)
			}
		}
		if r.LastRunID != nil {
			last := runRecord(db.PglockCronRun{
				ID: *r.LastRunID, Schedule: r.Name, ScheduledTime: db.Deref(r.LastScheduledTime), Kind: db.Deref(r.LastKind),
				Status: db.Deref(r.LastStatus), Attempt: db.Deref(r.LastAttempt), Instance: r.LastInstanceRun,
				FencingToken: r.LastToken, StartedAt: r.LastStartedAt, FinishedAt: r.LastFinishedAt, Error: r.LastError,
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
	return parseStored(row.Spec, row.TimeZone)
}

func parseStored(spec, zone string) (schedule, error) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, errs.Errorf("%w: time zone %q: %w", pglock.ErrInvalidSpec, zone, err)
	}
	sched, _, err := parseSpec(spec, loc)
	return sched, err
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
