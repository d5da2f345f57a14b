package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/ops"
	"github.com/pglock/pglock/jobs"
)

// errForgetNotConfirmed ends a forget that only showed what it would do.
var errForgetNotConfirmed = errors.New("nothing done: run again with --force to forget it")

func (a *app) jobsCommand() *cobra.Command {
	var scope string
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Show and forget job records (package jobs): what ran, when, how often, with what outcome",
	}
	cmd.PersistentFlags().StringVar(&scope, "scope", "", "the scope of the keys")

	var status, glob string
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List job records in key order",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status != "" && status != string(jobs.StatusRunning) && status != string(jobs.StatusSucceeded) && status != string(jobs.StatusFailed) {
				return usagef("--status must be running, succeeded or failed, not %q", status)
			}
			if limit < 1 {
				return usagef("--limit must be positive")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				list, err := ops.ListJobs(ctx, pool, ops.JobFilter{Scope: scope, AnyScope: !cmd.Flags().Changed("scope"),
					Status: status, KeyGlob: glob, Limit: min(limit, 1_000_000)})
				if err != nil {
					return err
				}
				return a.printJobs(list)
			})
		},
	}
	list.Flags().StringVar(&status, "status", "", "only records with this status: running, succeeded or failed")
	list.Flags().StringVar(&glob, "key", "*", "only keys that match this pattern, where * is any text and ? any character")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many records")

	show := &cobra.Command{
		Use:   "show KEY",
		Short: "Show one job record in full",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				rec, now, err := ops.GetJob(ctx, pool, scope, arguments[0])
				if err != nil {
					return err
				}
				return a.printJob(rec, now)
			})
		},
	}

	var force bool
	forget := &cobra.Command{
		Use:   "forget KEY --force",
		Short: "Delete a job record so that the key runs again: show it, and delete it with --force",
		Long: "forget KEY shows the record it would delete and exits with 1; with --force it deletes it (after a " +
			"RunTx transaction under way on the key ends), and the key's next delivery runs it again. A Run " +
			"attempt under way loses its lease.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				key := arguments[0]
				j, _, err := ops.GetJob(ctx, pool, scope, key)
				if err != nil {
					return err
				}
				if !force {
					fmt.Fprintf(a.stdout, "would forget %q (%s, %d attempts, token %d), so that it runs again\n",
						key, j.Status, j.Attempts, j.Token)
					return errForgetNotConfirmed
				}
				if err := ops.Forget(ctx, pool, scope, key); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "forgot %q (%s, %d attempts, token %d)\n", key, j.Status, j.Attempts, j.Token)
				return nil
			})
		},
	}
	forget.Flags().BoolVar(&force, "force", false, "really delete the record")
	cmd.AddCommand(list, show, forget)
	return cmd
}

func (a *app) printJobs(list ops.Jobs) error {
	if a.output == "json" {
		return writeJSON(a.stdout, list.Records)
	}
	lines := make([][]string, 0, len(list.Records))
	for _, j := range list.Records {
		finished := "-"
		if j.FinishedAt != nil {
			finished = timestamp(*j.FinishedAt, list.Now)
		}
		lines = append(lines, []string{
			orDash(j.Scope), j.Key, j.Status, strconv.Itoa(int(j.Attempts)), strconv.FormatInt(j.Token, 10),
			orDash(j.Instance), timestamp(j.StartedAt, list.Now), finished, timestamp(j.RetainUntil, list.Now),
			orDash(oneLine(db.Deref(j.LastError), 60)),
		})
	}
	return table(a.stdout, []string{"SCOPE", "KEY", "STATUS", "ATTEMPTS", "TOKEN", "INSTANCE", "STARTED", "FINISHED", "KEPT UNTIL", "LAST ERROR"}, lines)
}

func (a *app) printJob(j ops.JobRecord, now time.Time) error {
	if a.output == "json" {
		return writeJSON(a.stdout, j)
	}
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return timestamp(*t, now)
	}
	return table(a.stdout, []string{"FIELD", "VALUE"}, [][]string{
		{"scope", orDash(j.Scope)}, {"key", j.Key}, {"status", j.Status},
		{"attempts", strconv.Itoa(int(j.Attempts))}, {"token", strconv.FormatInt(j.Token, 10)},
		{"holder", j.Holder}, {"instance", orDash(j.Instance)},
		{"lease expires", at(j.LeaseExpiresAt)}, {"started", at(&j.StartedAt)}, {"finished", at(j.FinishedAt)},
		{"kept until", at(&j.RetainUntil)}, {"first claimed", at(&j.CreatedAt)},
		{"fingerprint", orDash(db.Deref(j.Fingerprint))}, {"last error", orDash(db.Deref(j.LastError))},
		{"result", orDash(string(j.Result))},
	})
}

// oneLine shortens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
