package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
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
