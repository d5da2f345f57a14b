package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/db"
)

func (a *app) gcCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Delete expired lock rows and waiter places",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				counts, err := db.New(db.Translating(pool)).CollectGarbage(ctx)
				if err != nil {
					return err
				}
				if a.output == "json" {
					return writeJSON(a.stdout, map[string]int64{"expired_locks": counts.ExpiredLocks, "expired_waiters": counts.ExpiredWaiters})
				}
				_, err = fmt.Fprintf(a.stdout, "deleted %d expired locks and %d expired waiter places\n", counts.ExpiredLocks, counts.ExpiredWaiters)
				return err
			})
		},
	}
}
