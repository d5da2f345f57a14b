package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/migrations"
)

func (a *app) migrateCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Install, remove or inspect pglock's SQL"}
	up := &cobra.Command{
		Use: "up", Short: "Apply every pending migration", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := migrations.Up(ctx, pool); err != nil {
					return err
				}
				return a.printStatus(ctx, pool)
			})
		},
	}
	var steps int
	var all bool
	down := &cobra.Command{
		Use: "down (--steps N | --all)", Short: "Revert migrations", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == (steps != 0) {
				return usagef("give exactly one of --steps N and --all")
			}
			if steps < 0 {
				return usagef("--steps must be positive")
			}
			if all {
				steps = migrations.AllSteps
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := migrations.Down(ctx, pool, steps); err != nil {
					return err
				}
				return a.printStatus(ctx, pool)
			})
		},
	}
	down.Flags().IntVar(&steps, "steps", 0, "revert this many migrations")
	down.Flags().BoolVar(&all, "all", false, "revert every migration, removing all of pglock's objects")
	status := &cobra.Command{
		Use: "status", Short: "Show the installed version, the dirty flag and pending files", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, a.printStatus)
		},
	}
	force := &cobra.Command{
		Use: "force VERSION", Short: "Record VERSION as installed and clean, after fixing a failed migration",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			version, err := strconv.Atoi(arguments[0])
			if err != nil || version < 0 {
				return usagef("VERSION must be a whole number, got %q", arguments[0])
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := migrations.Force(ctx, pool, version); err != nil {
					return err
				}
				return a.printStatus(ctx, pool)
			})
		},
	}
	cmd.AddCommand(up, down, status, force)
	return cmd
}

// statusJSON is migrate's JSON output; its field names are stable.
type statusJSON struct {
	Version uint     `json:"version"`
	Latest  uint     `json:"latest"`
	Dirty   bool     `json:"dirty"`
	Pending []string `json:"pending"`
}

func (a *app) printStatus(ctx context.Context, pool *pgxpool.Pool) error {
	status, err := migrations.Version(ctx, pool)
	if err != nil {
		return err
	}
	if a.output == "json" {
		pending := status.Pending
		if pending == nil {
			pending = []string{}
		}
		return writeJSON(a.stdout, statusJSON{Version: status.Version, Latest: status.Latest, Dirty: status.Dirty, Pending: pending})
	}
	fmt.Fprintf(a.stdout, "version  %d of %d\ndirty    %t\n", status.Version, status.Latest, status.Dirty)
	for _, file := range status.Pending {
		fmt.Fprintf(a.stdout, "pending  %s\n", file)
	}
	return nil
}
