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
		Use:   "status",
		Short: "Show the installed version, the dirty flag, pending files and drift (exit code 3)",
		Long: "Shows the installed version, the dirty flag, the pending files, and every function, table, index,\n" +
			"type or sequence of pglock's whose definition is not what the installed version made. Exits\n" +
			"with 3 when one differs (`pglockctl migrate repair` makes functions again).",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				status, err := a.showStatus(ctx, pool)
				if err == nil && len(status.Drift) > 0 {
					return driftError{len(status.Drift)}
				}
				return err
			})
		},
	}
	repair := &cobra.Command{
		Use: "repair", Short: "Make the installed version's functions again, as its migration made them", Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := migrations.Repair(ctx, pool); err != nil {
					return err
				}
				return a.printStatus(ctx, pool)
			})
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
	cmd.AddCommand(up, down, status, force, repair)
	return cmd
}

// statusJSON is migrate's JSON output; its field names are stable.
type statusJSON struct {
	Version uint        `json:"version"`
	Latest  uint        `json:"latest"`
	Dirty   bool        `json:"dirty"`
	Pending []string    `json:"pending"`
	Drift   []driftJSON `json:"drift"`
}

type driftJSON struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Change string `json:"change"`
}

func (a *app) printStatus(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := a.showStatus(ctx, pool)
	return err
}

// showStatus prints what [migrations.Version] reports, and returns it.
func (a *app) showStatus(ctx context.Context, pool *pgxpool.Pool) (migrations.Status, error) {
	status, err := migrations.Version(ctx, pool)
	if err != nil {
		return status, err
	}
	if a.output == "json" {
		pending := status.Pending
		if pending == nil {
			pending = []string{}
		}
		drift := []driftJSON{}
		for _, d := range status.Drift {
			drift = append(drift, driftJSON{d.Kind, d.Name, d.Change})
		}
		return status, writeJSON(a.stdout, statusJSON{Version: status.Version, Latest: status.Latest, Dirty: status.Dirty, Pending: pending, Drift: drift})
	}
	fmt.Fprintf(a.stdout, "version  %d of %d\ndirty    %t\n", status.Version, status.Latest, status.Dirty)
	for _, file := range status.Pending {
		fmt.Fprintf(a.stdout, "pending  %s\n", file)
	}
	switch {
	case status.Drift == nil:
	case len(status.Drift) == 0:
		fmt.Fprintf(a.stdout, "drift    none: every object is as version %d made it\n", status.Version)
	default:
		for _, d := range status.Drift {
			fmt.Fprintf(a.stdout, "drift    %s\n", d)
		}
	}
	return status, nil
}
