package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/internal/ops"
)

func (a *app) gcCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Delete expired lock rows, waiter places, job records and cron run history past its retention",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				c, err := ops.Collect(ctx, pool)
				if err != nil {
					return err
				}
				if a.output == "json" {
					return writeJSON(a.stdout, c)
				}
				_, err = fmt.Fprintf(a.stdout, "deleted %d expired locks, %d expired waiter places, %d expired job records and %d cron runs past retention\n",
					c.ExpiredLocks, c.ExpiredWaiters, c.ExpiredJobs, c.ExpiredCronRuns)
				return err
			})
		},
	}
}
