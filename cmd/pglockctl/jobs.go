package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
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
				params := db.ListJobsParams{MaxRows: int32(min(limit, 1<<31-1)), KeyLike: likePattern(glob)}
				if status != "" {
					params.Status = &status
				}
				if cmd.Flags().Changed("scope") {
					params.Scope = &scope
				}
				rows, err := db.New(db.Translating(pool)).ListJobs(ctx, params)
				if err != nil {
					return err
				}
				return a.printJobs(rows)
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
				row, err := a.job(ctx, pool, scope, arguments[0])
				if err != nil {
					return err
				}
				return a.printJob(row)
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
				row, err := a.job(ctx, pool, scope, key)
				if err != nil {
					return err
				}
				j := row.PglockJob
				if !force {
					fmt.Fprintf(a.stdout, "would forget %q (%s, %d attempts, token %d), so that it runs again\n",
						key, j.Status, j.Attempts, j.FencingToken)
					return errForgetNotConfirmed
				}
				d, err := jobs.New(pool, &jobs.Config{AppName: "pglockctl", Scope: scope})
				if err != nil {
					return err
				}
				if err := d.Forget(ctx, key); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "forgot %q (%s, %d attempts, token %d)\n", key, j.Status, j.Attempts, j.FencingToken)
				return nil
			})
		},
	}
	forget.Flags().BoolVar(&force, "force", false, "really delete the record")
	cmd.AddCommand(list, show, forget)
	return cmd
}

// job reads one record, or says there is none.
func (a *app) job(ctx context.Context, pool *pgxpool.Pool, scope, key string) (db.GetJobRow, error) {
	row, err := db.New(db.Translating(pool)).GetJob(ctx, db.GetJobParams{Scope: scope, JobKey: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fmt.Errorf("%w: no record of job %q in scope %q", pglock.ErrNotFound, key, scope)
	}
	return row, err
}

// jobJSON is a record as -o json prints it; its field names are stable (see docs/pglockctl.md).
type jobJSON struct {
	Scope          string          `json:"scope"`
	Key            string          `json:"key"`
	Status         string          `json:"status"`
	Holder         string          `json:"holder"`
	Instance       string          `json:"instance"`
	Attempts       int32           `json:"attempts"`
	Token          int64           `json:"token"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	StartedAt      time.Time       `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	LastError      *string         `json:"last_error"`
	Result         json.RawMessage `json:"result"`
	Fingerprint    *string         `json:"fingerprint"`
	RetainUntil    time.Time       `json:"retain_until"`
	CreatedAt      time.Time       `json:"created_at"`
}

func toJSON(j db.PglockJob) jobJSON {
	return jobJSON{
		Scope: j.Scope, Key: j.JobKey, Status: j.Status, Holder: j.HolderID, Instance: j.Instance,
		Attempts: j.Attempts, Token: j.FencingToken, LeaseExpiresAt: j.LeaseExpiresAt, StartedAt: j.StartedAt,
		FinishedAt: j.FinishedAt, LastError: j.LastError, Result: j.Result, Fingerprint: j.Fingerprint,
		RetainUntil: j.RetainUntil, CreatedAt: j.CreatedAt,
	}
}

func (a *app) printJobs(rows []db.ListJobsRow) error {
	if a.output == "json" {
		out := make([]jobJSON, 0, len(rows))
		for _, r := range rows {
			out = append(out, toJSON(r.PglockJob))
		}
		return writeJSON(a.stdout, out)
	}
	lines := make([][]string, 0, len(rows))
	for _, r := range rows {
		j := r.PglockJob
		finished := "-"
		if j.FinishedAt != nil {
			finished = timestamp(*j.FinishedAt, r.Now)
		}
		lines = append(lines, []string{
			orDash(j.Scope), j.JobKey, j.Status, strconv.Itoa(int(j.Attempts)), strconv.FormatInt(j.FencingToken, 10),
			orDash(j.Instance), timestamp(j.StartedAt, r.Now), finished, timestamp(j.RetainUntil, r.Now),
			orDash(oneLine(db.Deref(j.LastError), 60)),
		})
	}
	return table(a.stdout, []string{"SCOPE", "KEY", "STATUS", "ATTEMPTS", "TOKEN", "INSTANCE", "STARTED", "FINISHED", "KEPT UNTIL", "LAST ERROR"}, lines)
}

func (a *app) printJob(row db.GetJobRow) error {
	j := row.PglockJob
	if a.output == "json" {
		return writeJSON(a.stdout, toJSON(j))
	}
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return timestamp(*t, row.Now)
	}
	return table(a.stdout, []string{"FIELD", "VALUE"}, [][]string{
		{"scope", orDash(j.Scope)}, {"key", j.JobKey}, {"status", j.Status},
		{"attempts", strconv.Itoa(int(j.Attempts))}, {"token", strconv.FormatInt(j.FencingToken, 10)},
		{"holder", j.HolderID}, {"instance", orDash(j.Instance)},
		{"lease expires", at(j.LeaseExpiresAt)}, {"started", at(&j.StartedAt)}, {"finished", at(j.FinishedAt)},
		{"kept until", at(&j.RetainUntil)}, {"first claimed", at(&j.CreatedAt)},
		{"fingerprint", orDash(db.Deref(j.Fingerprint))}, {"last error", orDash(db.Deref(j.LastError))},
		{"result", orDash(string(j.Result))},
	})
}

// likePattern turns a glob (* any text, ? one character) into a LIKE pattern; nil for "*".
func likePattern(glob string) *string {
	if glob == "*" {
		return nil
	}
	var b strings.Builder
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteByte('%')
		case '?':
			b.WriteByte('_')
		case '%', '_', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	pattern := b.String()
	return &pattern
}

// oneLine shortens s to one line of at most n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
