package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/ops"
	"github.com/pglock/pglock/leader"
)

// errResignNotConfirmed ends a resign that only showed what it would do.
var errResignNotConfirmed = errors.New("nothing done: run again with --force to depose the leader")

func (a *app) leaderCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "leader",
		Short: "Show leader elections (package leader), and depose a leader",
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List elections: leader, instance, term, since, expires, candidates waiting",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				leaders, err := ops.Leaders(ctx, pool)
				if err != nil {
					return err
				}
				now, err := ops.DatabaseNow(ctx, pool)
				if err != nil {
					return err
				}
				return a.printLeaders(leaders, now)
			})
		},
	}
	var force bool
	resign := &cobra.Command{
		Use:   "resign NAME --force",
		Short: "Depose an election's leader: show it, and depose it with --force",
		Long: "resign NAME shows the leader it would depose and exits with 1; with --force it releases the leader's " +
			"lock: the next candidate is elected at once with a higher term, and the deposed leader is told at its " +
			"next renewal (within a third of its TTL), when its OnElected context is canceled.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			name := arguments[0]
			if err := pglock.ValidateName(name); err != nil || len(name) > leader.MaxNameLen {
				return usagef("%q is not an election's name (1 to %d bytes of UTF-8 without NUL)", name, leader.MaxNameLen)
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				l, err := ops.Leader(ctx, pool, name)
				if err != nil {
					return err
				}
				if !force {
					fmt.Fprintf(a.stdout, "would depose the leader of %q: %s (%s), term %d\n", name, l.Holder, orDash(l.Instance), l.Term)
					return errResignNotConfirmed
				}
				deposed, err := ops.Resign(ctx, pool, name, nil)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "deposed the leader of %q: %s (%s), term %d\n", name, deposed.Holder, orDash(deposed.Instance), deposed.Token)
				return nil
			})
		},
	}
	resign.Flags().BoolVar(&force, "force", false, "really depose the leader")
	cmd.AddCommand(list, resign)
	return cmd
}

// leaderJSON is an election as -o json prints it; its field names are stable (docs/pglockctl.md).
type leaderJSON struct {
	Election    string     `json:"election"`
	Leader      *string    `json:"leader"` // the holder id; null without a leader
	Instance    *string    `json:"instance"`
	Term        *int64     `json:"term"`
	Since       *time.Time `json:"since"`
	ExpiresAt   *time.Time `json:"expires_at"`
	ExpiresInMs *int64     `json:"expires_in_ms"`
	Candidates  int        `json:"candidates"`
}

func (a *app) printLeaders(leaders []leader.Leader, now time.Time) error {
	if a.output == "json" {
		out := make([]leaderJSON, 0, len(leaders))
		for _, l := range leaders {
			j := leaderJSON{Election: l.Election, Candidates: l.Candidates}
			if l.Term != 0 {
				expiresIn := l.ExpiresAt.Sub(now).Milliseconds()
				j.Leader, j.Instance, j.Term, j.Since, j.ExpiresAt, j.ExpiresInMs = &l.Holder, &l.Instance, &l.Term, &l.Since, &l.ExpiresAt, &expiresIn
			}
			out = append(out, j)
		}
		return writeJSON(a.stdout, map[string]any{"now": now, "elections": out})
	}
	rows := make([][]string, 0, len(leaders))
	for _, l := range leaders {
		if l.Term == 0 {
			rows = append(rows, []string{l.Election, "-", "-", "-", "-", "-", strconv.Itoa(l.Candidates)})
			continue
		}
		rows = append(rows, []string{l.Election, l.Holder, orDash(l.Instance), strconv.FormatInt(l.Term, 10),
			timestamp(l.Since, now), timestamp(l.ExpiresAt, now), strconv.Itoa(l.Candidates)})
	}
	return table(a.stdout, []string{"ELECTION", "LEADER", "INSTANCE", "TERM", "SINCE", "EXPIRES", "CANDIDATES"}, rows)
}
