package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/jobs"
)

func (a *app) gcCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Delete expired lock rows, waiter places, job records and cron run history past its retention",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				counts, err := db.New(db.Translating(pool)).CollectGarbage(ctx)
				if err != nil {
					return err
				}
				expiredJobs, err := jobs.Collect(ctx, pool)
				if err != nil {
					return err
				}
				cronRuns, err := cron.Collect(ctx, pool)
				if err != nil {
					return err
				}
				if a.output == "json" {
					return writeJSON(a.stdout, map[string]int64{"expired_locks": counts.ExpiredLocks,
						"expired_waiters": counts.ExpiredWaiters, "expired_jobs": int64(expiredJobs), "expired_cron_runs": int64(cronRuns)})
				}
				_, err = fmt.Fprintf(a.stdout, "deleted %d expired locks, %d expired waiter places, %d expired job records and %d cron runs past retention\n",
					counts.ExpiredLocks, counts.ExpiredWaiters, expiredJobs, cronRuns)
				return err
			})
		},
	}
}
