package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/db"
)

// Schedule reads a schedule, limit of its runs (newest first: the latest, or when before is
// not nil those older than it) and the database's now; pglock.ErrNotFound if there is no such
// schedule. more says whether older runs remain.
func Schedule(ctx context.Context, pool *pgxpool.Pool, name string, before *cron.RunRecord, limit int) (_ cron.ScheduleInfo, _ []cron.RunRecord, more bool, _ time.Time, _ error) {
	list, err := cron.List(ctx, pool)
	if err != nil {
		return cron.ScheduleInfo{}, nil, false, time.Time{}, err
	}
	for _, s := range list {
		if s.Name != name {
			continue
		}
		var runs []cron.RunRecord
		if before == nil {
			runs, err = cron.History(ctx, pool, name, limit+1)
		} else {
			runs, err = cron.HistoryBefore(ctx, pool, name, *before, limit+1)
		}
		if err != nil {
			return cron.ScheduleInfo{}, nil, false, time.Time{}, err
		}
		if len(runs) > limit {
			runs, more = runs[:limit], true
		}
		now, err := DatabaseNow(ctx, pool)
		return s, runs, more, now, err
	}
	return cron.ScheduleInfo{}, nil, false, time.Time{}, fmt.Errorf("%w: no schedule %q", pglock.ErrNotFound, name)
}

// Schedules lists every schedule, with its next fire times and last run (cron.List).
func Schedules(ctx context.Context, pool *pgxpool.Pool) ([]cron.ScheduleInfo, error) {
	return cron.List(ctx, pool)
}

// History is a schedule's limit newest runs (cron.History).
func History(ctx context.Context, pool *pgxpool.Pool, name string, limit int) ([]cron.RunRecord, error) {
	return cron.History(ctx, pool, name, limit)
}

// Pause pauses a schedule, with the operator's note (cron.Pause).
func Pause(ctx context.Context, pool *pgxpool.Pool, name, note, by string) error {
	return cron.Pause(ctx, pool, name, note, by)
}

// Resume resumes a paused schedule (cron.Resume).
func Resume(ctx context.Context, pool *pgxpool.Pool, name string) error {
	return cron.Resume(ctx, pool, name)
}

// Trigger asks for a manual run of a schedule; answers its id (cron.Trigger).
func Trigger(ctx context.Context, pool *pgxpool.Pool, name, by string) (int64, error) {
	return cron.Trigger(ctx, pool, name, by)
}

// Backfill queues the ticks of [from, to] that have no run; answers how many (cron.Backfill).
func Backfill(ctx context.Context, pool *pgxpool.Pool, name string, from, to time.Time, by string) (int, error) {
	return cron.Backfill(ctx, pool, name, from, to, by)
}

// PreviewBackfill says how many ticks Backfill would queue (cron.PreviewBackfill).
func PreviewBackfill(ctx context.Context, pool *pgxpool.Pool, name string, from, to time.Time) (int, error) {
	return cron.PreviewBackfill(ctx, pool, name, from, to)
}

// Instance is a scheduler instance, and its host's clock as it last measured it.
type Instance struct {
	Name        string
	Offset      time.Duration // the database's clock minus the host's
	Uncertainty time.Duration
	SeenAt      time.Time // by the database's clock
}

// Instances lists the scheduler instances seen within cron.OrphanedAfter: the live ones.
func Instances(ctx context.Context, pool *pgxpool.Pool, now time.Time) ([]Instance, error) {
	rows, err := db.New(db.Translating(pool)).ListInstances(ctx, now.Add(-cron.OrphanedAfter))
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(rows))
	for _, r := range rows {
		out = append(out, Instance{Name: r.Instance, Offset: time.Duration(r.ClockOffsetUs) * time.Microsecond,
			Uncertainty: time.Duration(r.UncertaintyUs) * time.Microsecond, SeenAt: r.SeenAt})
	}
	return out, nil
}

// Definition reads a runtime schedule's definition, for an update that changes part of it;
// pglock.ErrNotFound if there is no such schedule, pglock.ErrDefinedInCode if it was added in
// code.
func Definition(ctx context.Context, pool *pgxpool.Pool, name string) (cron.Definition, error) {
	list, err := cron.List(ctx, pool)
	if err != nil {
		return cron.Definition{}, err
	}
	for _, s := range list {
		switch {
		case s.Name != name:
		case s.Kind == "":
			return cron.Definition{}, fmt.Errorf("%w: schedule %q is defined in code: change it there", pglock.ErrDefinedInCode, name)
		default:
			return s.Definition()
		}
	}
	return cron.Definition{}, fmt.Errorf("%w: no schedule %q", pglock.ErrNotFound, name)
}

// Define creates a runtime schedule (cron.Define).
func Define(ctx context.Context, pool *pgxpool.Pool, def cron.Definition, change *cron.Change) error {
	return cron.Define(ctx, pool, def, change)
}

// Update replaces a runtime schedule's definition (cron.Update).
func Update(ctx context.Context, pool *pgxpool.Pool, def cron.Definition, change *cron.Change) error {
	return cron.Update(ctx, pool, def, change)
}

// Delete deletes a runtime schedule (cron.Delete).
func Delete(ctx context.Context, pool *pgxpool.Pool, name string, change *cron.Change) error {
	return cron.Delete(ctx, pool, name, change)
}
