package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/ops"
)

// Exit codes of cron create, update and delete, beyond the common ones.
const (
	exitNotFound = 4 // no such schedule
	exitConflict = 5 // the name is taken, or the schedule is defined in code
)

// definitionFlags are a runtime schedule's definition as flags: create takes them all (with
// the defaults), update only those given.
type definitionFlags struct {
	kind, spec, zone, args, overlap, catchUp, start, end string
	catchUpWindow, timeout, ttl, retention, jitter       time.Duration
	maxRuns, runLimit, pauseAfterFailures                int
}

func (f *definitionFlags) register(flags *pflag.FlagSet) {
	flags.StringVar(&f.kind, "kind", "", "the handler that runs it (Scheduler.Handle)")
	flags.StringVar(&f.spec, "spec", "", "when it fires: five cron fields, six with seconds, @every 1m, @daily, L for the month's last day")
	flags.StringVar(&f.zone, "zone", "UTC", "the time zone a spec without CRON_TZ= is read in")
	flags.StringVar(&f.args, "args", "", "JSON given to each run (Run.Args)")
	flags.StringVar(&f.overlap, "overlap", string(cron.DefaultOverlap), "skip, buffer_one, allow or replace")
	flags.StringVar(&f.catchUp, "catch-up", string(cron.DefaultCatchUp), "skip, latest or all")
	flags.DurationVar(&f.catchUpWindow, "catch-up-window", cron.DefaultCatchUpWindow, "how old a missed tick may be and still catch up")
	flags.DurationVar(&f.timeout, "timeout", 0, "a run's time limit (0: none)")
	flags.DurationVar(&f.ttl, "ttl", cron.DefaultTTL, "a run's lease")
	flags.DurationVar(&f.retention, "retention", cron.DefaultRetention, "how long run history is kept")
	flags.IntVar(&f.maxRuns, "max-runs", cron.DefaultMaxRuns, "how many runs of history are kept")
	flags.DurationVar(&f.jitter, "jitter", 0, "each tick fires at an offset in [0, jitter) (shorter than the interval)")
	flags.StringVar(&f.start, "start", "", "no tick before this time (RFC 3339; empty: no bound)")
	flags.StringVar(&f.end, "end", "", "no tick after this time (RFC 3339; empty: no bound)")
	flags.IntVar(&f.runLimit, "run-limit", 0, "the schedule finishes after this many runs (0: no limit)")
	flags.IntVar(&f.pauseAfterFailures, "pause-after-failures", 0, "pause after this many failed runs in a row (0: never)")
}

// apply writes the flags given (all of them, for a new definition) into def.
func (f *definitionFlags) apply(flags *pflag.FlagSet, def *cron.Definition, all bool) error {
	given := func(name string) bool { return all || flags.Changed(name) }
	if def.Options == nil {
		def.Options = &cron.Options{}
	}
	o := def.Options
	if given("kind") {
		def.Kind = f.kind
	}
	if given("spec") {
		def.Spec = f.spec
	}
	if given("zone") {
		loc, err := time.LoadLocation(f.zone)
		if err != nil || f.zone == "" || f.zone == "Local" {
			return usagef("--zone %q is not a time zone name such as Europe/Berlin", f.zone)
		}
		o.Location = loc
	}
	if given("args") {
		def.Args = nil
		if f.args != "" {
			if !json.Valid([]byte(f.args)) {
				return usagef("--args must be JSON, such as '{\"tenant\": 42}'")
			}
			def.Args = json.RawMessage(f.args)
		}
	}
	times := map[string]*time.Time{"start": &o.Start, "end": &o.End}
	for name, value := range map[string]string{"start": f.start, "end": f.end} {
		if !given(name) {
			continue
		}
		*times[name] = time.Time{}
		if value != "" {
			t, err := time.Parse(time.RFC3339, value)
			if err != nil {
				return usagef("--%s must be an RFC 3339 time such as 2026-12-01T00:00:00Z: %v", name, err)
			}
			*times[name] = t
		}
	}
	set := func(name string, apply func()) {
		if given(name) {
			apply()
		}
	}
	set("overlap", func() { o.Overlap = cron.Overlap(f.overlap) })
	set("catch-up", func() { o.CatchUp = cron.CatchUp(f.catchUp) })
	set("catch-up-window", func() { o.CatchUpWindow = f.catchUpWindow })
	set("timeout", func() { o.Timeout = f.timeout })
	set("ttl", func() { o.TTL = f.ttl })
	set("retention", func() { o.Retention = f.retention })
	set("max-runs", func() { o.MaxRuns = f.maxRuns })
	set("jitter", func() { o.Jitter = f.jitter })
	set("run-limit", func() { o.RunLimit = f.runLimit })
	set("pause-after-failures", func() { o.PauseAfterFailures = f.pauseAfterFailures })
	return nil
}

// definitionCommands are cron create, update and delete.
func (a *app) definitionCommands(by *string) []*cobra.Command {
	var note string
	var dryRun bool
	common := func(cmd *cobra.Command) *cobra.Command {
		cmd.Flags().StringVar(&note, "note", "", "why (required): recorded with the change")
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check everything, what the database would refuse included, and change nothing")
		return cmd
	}
	needNote := func() error {
		if strings.TrimSpace(note) == "" {
			return usagef("--note must say why")
		}
		return nil
	}
	change := func() *cron.Change { return &cron.Change{By: *by, Note: note, DryRun: dryRun} }
	// onDefinition runs do with the definition of the runtime schedule name, once a note is given.
	onDefinition := func(cmd *cobra.Command, name string, do func(context.Context, *pgxpool.Pool, cron.Definition) error) error {
		if err := needNote(); err != nil {
			return err
		}
		return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
			def, err := ops.Definition(ctx, pool, name)
			if err != nil {
				return definitionError(err)
			}
			return do(ctx, pool, def)
		})
	}

	var create definitionFlags
	createCmd := common(&cobra.Command{
		Use:   "create NAME --kind K --spec SPEC --note TEXT",
		Short: "Define a runtime schedule, run by the instances that handle its kind",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			if err := needNote(); err != nil {
				return err
			}
			def := cron.Definition{Name: arguments[0]}
			if err := create.apply(cmd.Flags(), &def, true); err != nil {
				return err
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := ops.Define(ctx, pool, def, change()); err != nil {
					return definitionError(err)
				}
				return a.printDefinition("create", dryRun, def)
			})
		},
	})
	create.register(createCmd.Flags())

	var update definitionFlags
	updateCmd := common(&cobra.Command{
		Use:   "update NAME [--spec SPEC] [--args JSON] [...] --note TEXT",
		Short: "Change a runtime schedule: the flags given replace those parts of its definition",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return onDefinition(cmd, arguments[0], func(ctx context.Context, pool *pgxpool.Pool, def cron.Definition) error {
				if err := update.apply(cmd.Flags(), &def, false); err != nil {
					return err
				}
				if err := ops.Update(ctx, pool, def, change()); err != nil {
					return definitionError(err)
				}
				return a.printDefinition("update", dryRun, def)
			})
		},
	})
	update.register(updateCmd.Flags())

	deleteCmd := common(&cobra.Command{
		Use:   "delete NAME --note TEXT",
		Short: "Delete a runtime schedule and its history: no tick of it starts once deleted",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return onDefinition(cmd, arguments[0], func(ctx context.Context, pool *pgxpool.Pool, def cron.Definition) error {
				if err := ops.Delete(ctx, pool, arguments[0], change()); err != nil {
					return definitionError(err)
				}
				return a.printDefinition("delete", dryRun, def)
			})
		},
	})
	return []*cobra.Command{createCmd, updateCmd, deleteCmd}
}

// exitError ends a command with its own exit code.
type exitError struct {
	code int
	error
}

func (e exitError) Unwrap() error { return e.error }

// definitionError gives a refused definition its exit code: a bad definition is a usage error,
// a missing schedule and a taken name have codes of their own.
func definitionError(err error) error {
	switch {
	case errors.Is(err, pglock.ErrInvalidArgument), errors.Is(err, pglock.ErrInvalidSpec), errors.Is(err, pglock.ErrInvalidName),
		errors.Is(err, pglock.ErrInvalidTTL):
		return usageError{err}
	case errors.Is(err, pglock.ErrNotFound):
		return exitError{exitNotFound, err}
	case errors.Is(err, pglock.ErrExists), errors.Is(err, pglock.ErrDefinedInCode):
		return exitError{exitConflict, err}
	}
	return err
}

// definitionJSON is a runtime schedule's definition as -o json prints it; its field names are
// stable (docs/pglockctl.md).
type definitionJSON struct {
	Name               string          `json:"name"`
	Kind               string          `json:"kind"`
	Spec               string          `json:"spec"`
	TimeZone           string          `json:"time_zone"`
	Args               json.RawMessage `json:"args"`
	Overlap            string          `json:"overlap"`
	CatchUp            string          `json:"catch_up"`
	CatchUpWindowMs    int64           `json:"catch_up_window_ms"`
	TimeoutMs          int64           `json:"timeout_ms"`
	TTLMs              int64           `json:"ttl_ms"`
	RetentionMs        int64           `json:"retention_ms"`
	MaxRuns            int             `json:"max_runs"`
	JitterMs           int64           `json:"jitter_ms"`
	Start              *time.Time      `json:"start"`
	End                *time.Time      `json:"end"`
	RunLimit           int             `json:"run_limit"`
	PauseAfterFailures int             `json:"pause_after_failures"`
}

func (a *app) printDefinition(op string, dryRun bool, def cron.Definition) error {
	o := def.Options
	if a.output == "json" {
		j := definitionJSON{Name: def.Name, Kind: def.Kind, Spec: def.Spec, TimeZone: "UTC", Args: def.Args,
			Overlap: string(o.Overlap), CatchUp: string(o.CatchUp), CatchUpWindowMs: o.CatchUpWindow.Milliseconds(),
			TimeoutMs: o.Timeout.Milliseconds(), TTLMs: o.TTL.Milliseconds(), RetentionMs: o.Retention.Milliseconds(),
			MaxRuns: o.MaxRuns, JitterMs: o.Jitter.Milliseconds(), RunLimit: o.RunLimit, PauseAfterFailures: o.PauseAfterFailures}
		if o.Location != nil {
			j.TimeZone = o.Location.String()
		}
		if !o.Start.IsZero() {
			j.Start = &o.Start
		}
		if !o.End.IsZero() {
			j.End = &o.End
		}
		return writeJSON(a.stdout, map[string]any{"op": op, "dry_run": dryRun, "schedule": j})
	}
	done := map[string]string{"create": "created", "update": "updated", "delete": "deleted"}[op]
	if dryRun {
		done = "would be " + done + " (dry run: nothing changed)"
	}
	_, err := fmt.Fprintf(a.stdout, "%q %s: kind %s, spec %s\n", def.Name, done, def.Kind, def.Spec)
	return err
}
