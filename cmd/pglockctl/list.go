package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/internal/ops"
)

func (a *app) listCommand() *cobra.Command {
	var kind, glob string
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show table and advisory locks: who holds them, since and until when, who waits",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != "table" && kind != "advisory" && kind != "all" {
				return usagef("--kind must be table, advisory or all, not %q", kind)
			}
			match := globMatcher(glob)
			if interval <= 0 {
				return usagef("--interval must be positive")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if !watch {
					return a.printLocks(ctx, pool, kind, match)
				}
				for {
					fmt.Fprint(a.stdout, "\033[H\033[2J") // home and clear, as watch(1) does
					fmt.Fprintf(a.stdout, "Every %s: pglockctl list (Ctrl-C to stop)\n\n", interval)
					// Ctrl-C mid-draw is the normal way to stop, not an error.
					if err := a.printLocks(ctx, pool, kind, match); err != nil && ctx.Err() == nil {
						return err
					}
					select {
					case <-ctx.Done():
						return nil
					case <-time.After(interval):
					}
				}
			})
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "all", "which locks: table, advisory or all")
	cmd.Flags().StringVar(&glob, "name", "*", "only locks whose name matches this pattern, where * is any text and ? any character (advisory: the registered name)")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch redraws")
	return cmd
}

func (a *app) printLocks(ctx context.Context, pool *pgxpool.Pool, kind string, match func(string) bool) error {
	locks, err := ops.ListLocks(ctx, pool, ops.LockFilter{Kind: kind, Match: match})
	if err != nil {
		return err
	}
	if a.output == "json" {
		return writeJSON(a.stdout, locks)
	}
	if kind != "advisory" {
		fmt.Fprintln(a.stdout, "TABLE LOCKS")
		rows := make([][]string, 0, len(locks.TableLocks))
		for _, l := range locks.TableLocks {
			expires := timestamp(l.ExpiresAt, locks.Now)
			if l.Expired {
				expires = "expired " + expires
			}
			rows = append(rows, []string{l.Name, l.Holder, orDash(l.Instance), strconv.FormatInt(l.Token, 10),
				timestamp(l.AcquiredAt, locks.Now), expires, strconv.FormatInt(l.Waiters, 10), string(l.Metadata)})
		}
		if err := table(a.stdout, []string{"NAME", "HOLDER", "INSTANCE", "TOKEN", "ACQUIRED", "EXPIRES", "WAITERS", "METADATA"}, rows); err != nil {
			return err
		}
	}
	if kind == "all" {
		fmt.Fprintln(a.stdout)
	}
	if kind != "table" {
		fmt.Fprintln(a.stdout, "ADVISORY LOCKS")
		rows := make([][]string, 0, len(locks.AdvisoryLocks))
		for _, l := range locks.AdvisoryLocks {
			key := fmt.Sprint(l.Pair)
			if l.Key != nil {
				key = strconv.FormatInt(*l.Key, 10)
			}
			state := "granted"
			if !l.Granted {
				state = "waiting since " + relative(-time.Duration(l.WaitingMs)*time.Millisecond)
			}
			blockedBy := "-"
			if len(l.BlockedBy) > 0 {
				blockedBy = fmt.Sprint(l.BlockedBy)
			}
			rows = append(rows, []string{key, orDash(l.Name), l.Mode, state, strconv.Itoa(int(l.PID)),
				orDash(l.ApplicationName), orDash(l.ClientAddr), blockedBy})
		}
		return table(a.stdout, []string{"KEY", "NAME", "MODE", "STATE", "PID", "APPLICATION", "CLIENT", "BLOCKED BY"}, rows)
	}
	return nil
}

// globMatcher matches whole names against pattern, where * is any text (slashes included:
// names are not paths) and ? one character.
func globMatcher(pattern string) func(string) bool {
	quoted := regexp.QuoteMeta(pattern)
	quoted = strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(quoted)
	re := regexp.MustCompile("^(?s:" + quoted + ")$")
	return re.MatchString
}
