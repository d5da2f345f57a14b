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

// Schedule reads a schedule, its latest limit runs (newest first) and the database's now;
// pglock.ErrNotFound if there is no such schedule.
func Schedule(ctx context.Context, pool *pgxpool.Pool, name string, limit int) (cron.ScheduleInfo, []cron.RunRecord, time.Time, error) {
	list, err := cron.List(ctx, pool)
	if err != nil {
		return cron.ScheduleInfo{}, nil, time.Time{}, err
	}
	for _, s := range list {
		if s.Name != name {
			continue
		}
		runs, err := cron.History(ctx, pool, name, limit)
		if err != nil {
			return cron.ScheduleInfo{}, nil, time.Time{}, err
		}
		now, err := DatabaseNow(ctx, pool)
		return s, runs, now, err
	}
	return cron.ScheduleInfo{}, nil, time.Time{}, fmt.Errorf("%w: no schedule %q", pglock.ErrNotFound, name)
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
