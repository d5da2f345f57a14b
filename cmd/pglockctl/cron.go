package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/ops"
)

func (a *app) cronCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "Show cron schedules and their runs (package cron); create, update, delete, pause, resume, trigger and backfill them",
	}
	var by string
	cmd.PersistentFlags().StringVar(&by, "by", operator(), "who is asking, as recorded with a change, pause, trigger or backfill")

	list := &cobra.Command{
		Use:   "list",
		Short: "List schedules: kind, spec, policies, state (active, paused, finished, unhandled, orphaned), last run, next five fire times",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				list, err := ops.Schedules(ctx, pool)
				if err != nil {
					return err
				}
				now, err := ops.DatabaseNow(ctx, pool)
				if err != nil {
					return err
				}
				return a.printSchedules(list, now)
			})
		},
	}

	var limit int
	history := &cobra.Command{
		Use:   "history NAME",
		Short: "List a schedule's runs, newest tick first",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			if limit < 1 {
				return usagef("--limit must be positive")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				runs, err := ops.History(ctx, pool, arguments[0], limit)
				if err != nil {
					return err
				}
				return a.printRuns(runs)
			})
		},
	}
	history.Flags().IntVar(&limit, "limit", 50, "at most this many runs")

	var note string
	pause := &cobra.Command{
		Use:   "pause NAME --note TEXT",
		Short: "Pause a schedule: every instance records its ticks as skipped, from the next one, until resumed",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			if strings.TrimSpace(note) == "" {
				return usagef("--note must say why the schedule is paused")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := ops.Pause(ctx, pool, arguments[0], note, by); err != nil {
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "paused %q: %s\n", arguments[0], note)
				return err
			})
		},
	}
	pause.Flags().StringVar(&note, "note", "", "why (required)")

	resume := &cobra.Command{
		Use:   "resume NAME",
		Short: "Resume a paused schedule from its next tick (ticks that came while paused stay skipped)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if err := ops.Resume(ctx, pool, arguments[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(a.stdout, "resumed %q\n", arguments[0])
				return err
			})
		},
	}

	trigger := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Ask for a manual run of a schedule, started as soon as its turn comes (recorded as manual; never one of its ticks)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				id, err := ops.Trigger(ctx, pool, arguments[0], by)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "triggered %q: run %d\n", arguments[0], id)
				return err
			})
		},
	}

	var from, to string
	backfill := &cobra.Command{
		Use:   "backfill NAME --from T --to T",
		Short: "Run each past tick of a schedule from T to T (RFC 3339, both included) that has not run",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			start, err := time.Parse(time.RFC3339, from)
			if err != nil {
				return usagef("--from must be an RFC 3339 time such as 2026-11-01T00:00:00Z: %v", err)
			}
			end, err := time.Parse(time.RFC3339, to)
			if err != nil {
				return usagef("--to must be an RFC 3339 time such as 2026-11-02T00:00:00Z: %v", err)
			}
			if end.Before(start) {
				return usagef("--to is before --from")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				n, err := ops.Backfill(ctx, pool, arguments[0], start, end, by)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "queued %d ticks of %q\n", n, arguments[0])
				return err
			})
		},
	}
	backfill.Flags().StringVar(&from, "from", "", "the first tick's earliest time (required)")
	backfill.Flags().StringVar(&to, "to", "", "the last tick's latest time (required)")

	cmd.AddCommand(list, history, pause, resume, trigger, backfill)
	cmd.AddCommand(a.definitionCommands(&by)...)
	return cmd
}

// operator names whoever runs pglockctl: user@host.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// scheduleJSON is a schedule as -o json prints it; its field names are stable (docs/pglockctl.md).
type scheduleJSON struct {
	Name         string          `json:"name"`
	Kind         *string         `json:"kind"` // null: defined in code
	Args         json.RawMessage `json:"args,omitempty"`
	Spec         string          `json:"spec"`
	TimeZone     string          `json:"time_zone"`
	Overlap      string          `json:"overlap"`
	CatchUp      string          `json:"catch_up"`
	State        string          `json:"state"` // active, paused, finished, unhandled or orphaned
	ChangedBy    *string         `json:"changed_by,omitempty"`
	ChangedAt    *time.Time      `json:"changed_at,omitempty"`
	ChangeNote   *string         `json:"change_note,omitempty"`
	PauseNote    *string         `json:"pause_note"`
	PausedBy     *string         `json:"paused_by"`
	LastInstance string          `json:"last_instance"`
	LastSeenAt   time.Time       `json:"last_seen_at"`
	LastStatus   *string         `json:"last_status"`
	LastTick     *time.Time      `json:"last_tick"`
	Next         []time.Time     `json:"next"`
}

func scheduleState(s cron.ScheduleInfo) string {
	switch {
	case s.Paused:
		return "paused"
	case s.Finished:
		return "finished"
	case s.Unhandled:
		return "unhandled"
	case s.Orphaned:
		return "orphaned"
	}
	return "active"
}

func (a *app) printSchedules(list []cron.ScheduleInfo, now time.Time) error {
	if a.output == "json" {
		out := make([]scheduleJSON, 0, len(list))
		for _, s := range list {
			j := scheduleJSON{Name: s.Name, Spec: s.Spec, TimeZone: s.TimeZone, Overlap: string(s.Overlap),
				CatchUp: string(s.CatchUp), State: scheduleState(s), LastInstance: s.LastInstance, LastSeenAt: s.LastSeenAt,
				Next: s.Next, Kind: nonEmpty(s.Kind), Args: s.Args, ChangedBy: nonEmpty(s.ChangedBy), ChangeNote: nonEmpty(s.ChangeNote)}
			if !s.ChangedAt.IsZero() {
				j.ChangedAt = &s.ChangedAt
			}
			if s.Paused {
				j.PauseNote, j.PausedBy = &s.PauseNote, &s.PausedBy
			}
			if s.LastRun != nil {
				status := string(s.LastRun.Status)
				j.LastStatus, j.LastTick = &status, &s.LastRun.ScheduledTime
			}
			out = append(out, j)
		}
		return writeJSON(a.stdout, map[string]any{"now": now, "schedules": out})
	}
	rows := make([][]string, 0, len(list))
	for _, s := range list {
		state := scheduleState(s)
		if s.Paused {
			state += " (" + s.PauseNote + ", by " + orDash(s.PausedBy) + ")"
		}
		last := "-"
		if s.LastRun != nil {
			last = string(s.LastRun.Status) + " " + timestamp(s.LastRun.ScheduledTime, now)
		}
		next := make([]string, len(s.Next))
		for i, t := range s.Next {
			next[i] = t.UTC().Format(time.RFC3339)
		}
		rows = append(rows, []string{s.Name, orDash(s.Kind), s.Spec, s.TimeZone, string(s.Overlap), string(s.CatchUp), state, last,
			orDash(strings.Join(next, " "))})
	}
	return table(a.stdout, []string{"NAME", "KIND", "SPEC", "ZONE", "OVERLAP", "CATCH-UP", "STATE", "LAST RUN", "NEXT"}, rows)
}

func (a *app) printRuns(runs []cron.RunRecord) error {
	if a.output == "json" {
		out := make([]runJSON, len(runs))
		for i, r := range runs {
			out[i] = runJSON{ID: r.ID, Tick: r.ScheduledTime, Kind: string(r.Kind), Status: string(r.Status), Attempt: r.Attempt,
				Instance: nonEmpty(r.Instance), RequestedBy: nonEmpty(r.RequestedBy), Error: nonEmpty(r.Error)}
			if r.Token != 0 {
				out[i].Token = &r.Token
			}
			if r.Status == cron.StatusMissed {
				out[i].MissedUntil, out[i].MissedCount = &r.MissedUntil, &r.MissedCount
			}
			if !r.StartedAt.IsZero() {
				out[i].StartedAt = &r.StartedAt
			}
			if !r.FinishedAt.IsZero() {
				out[i].FinishedAt = &r.FinishedAt
			}
			if !r.StartedAt.IsZero() && !r.FinishedAt.IsZero() {
				ms := r.Duration.Milliseconds()
				out[i].DurationMs = &ms
			}
		}
		return writeJSON(a.stdout, map[string]any{"runs": out})
	}
	rows := make([][]string, 0, len(runs))
	for _, r := range runs {
		tick := r.ScheduledTime.UTC().Format(time.RFC3339)
		if r.Status == cron.StatusMissed && !r.MissedUntil.Equal(r.ScheduledTime) {
			count := "many"
			if r.MissedCount >= 0 {
				count = strconv.FormatInt(r.MissedCount, 10)
			}
			tick += " .. " + r.MissedUntil.UTC().Format(time.RFC3339) + " (" + count + ")"
		}
		started, took := "-", "-"
		if !r.StartedAt.IsZero() {
			started = r.StartedAt.UTC().Format(time.RFC3339)
		}
		if !r.FinishedAt.IsZero() && !r.StartedAt.IsZero() {
			took = r.Duration.Round(time.Millisecond).String()
		}
		why, _, _ := strings.Cut(r.Error, "\n")
		if len(why) > 80 {
			why = strings.ToValidUTF8(why[:77], "") + "..."
		}
		rows = append(rows, []string{strconv.FormatInt(r.ID, 10), tick, string(r.Kind), string(r.Status),
			strconv.Itoa(r.Attempt), orDash(r.Instance), started, took, orDash(why)})
	}
	return table(a.stdout, []string{"ID", "TICK", "KIND", "STATUS", "ATTEMPT", "INSTANCE", "STARTED", "TOOK", "ERROR"}, rows)
}

// runJSON is a run as -o json prints it; its field names are stable (docs/pglockctl.md).
type runJSON struct {
	ID          int64      `json:"id"`
	Tick        time.Time  `json:"tick"`
	Kind        string     `json:"kind"`
	Status      string     `json:"status"`
	Attempt     int        `json:"attempt"`
	MissedUntil *time.Time `json:"missed_until,omitempty"`
	MissedCount *int64     `json:"missed_count,omitempty"` // -1: too many to count
	Instance    *string    `json:"instance"`
	RequestedBy *string    `json:"requested_by"`
	Token       *int64     `json:"token"` // null for a run that never started
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	DurationMs  *int64     `json:"duration_ms"`
	Error       *string    `json:"error"`
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
