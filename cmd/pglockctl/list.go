package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/db"
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

// The JSON of list; its field names are stable (see docs/pglockctl.md).
type (
	listJSON struct {
		Now           time.Time          `json:"now"`
		TableLocks    []tableLockJSON    `json:"table_locks"`
		AdvisoryLocks []advisoryLockJSON `json:"advisory_locks"`
	}
	tableLockJSON struct {
		Name        string          `json:"name"`
		Holder      string          `json:"holder"`
		Instance    string          `json:"instance"`
		Token       int64           `json:"token"`
		AcquiredAt  time.Time       `json:"acquired_at"`
		ExpiresAt   time.Time       `json:"expires_at"`
		ExpiresInMs int64           `json:"expires_in_ms"`
		Expired     bool            `json:"expired"`
		Waiters     int64           `json:"waiters"`
		Metadata    json.RawMessage `json:"metadata"`
	}
	advisoryLockJSON struct {
		Key             *int64    `json:"key"`  // null for a pair key
		Pair            *[2]int32 `json:"pair"` // null for a bigint key
		Name            string    `json:"name"`
		Mode            string    `json:"mode"`
		Granted         bool      `json:"granted"`
		WaitingMs       int64     `json:"waiting_ms"`
		PID             int32     `json:"pid"`
		ApplicationName string    `json:"application_name"`
		ClientAddr      string    `json:"client_addr"`
		SessionAgeMs    int64     `json:"session_age_ms"`
		BlockedBy       []int32   `json:"blocked_by"`
	}
)

func (a *app) printLocks(ctx context.Context, pool *pgxpool.Pool, kind string, match func(string) bool) error {
	locks, err := a.collect(ctx, pool, kind, match, nil)
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

// collect reads the locks kind asks for whose names match; only the table lock named only,
// when only is not nil.
func (a *app) collect(ctx context.Context, pool *pgxpool.Pool, kind string, match func(string) bool, only *string) (listJSON, error) {
	q := db.New(db.Translating(pool))
	now, err := q.DatabaseNow(ctx)
	if err != nil {
		return listJSON{}, err
	}
	out := listJSON{Now: now, TableLocks: []tableLockJSON{}, AdvisoryLocks: []advisoryLockJSON{}}
	if kind != "advisory" {
		rows, err := q.ListTableLocks(ctx, only)
		if err != nil {
			return listJSON{}, err
		}
		for _, r := range rows {
			if !match(r.LockName) {
				continue
			}
			out.TableLocks = append(out.TableLocks, tableLockJSON{
				Name: r.LockName, Holder: r.HolderID, Instance: r.Instance, Token: r.FencingToken,
				AcquiredAt: r.AcquiredAt, ExpiresAt: r.ExpiresAt, ExpiresInMs: r.ExpiresAt.Sub(now).Milliseconds(),
				Expired: !r.ExpiresAt.After(now), Waiters: r.Waiters, Metadata: r.Metadata,
			})
		}
	}
	if kind != "table" {
		locks, err := advisory.List(ctx, pool)
		if err != nil {
			return listJSON{}, err
		}
		for _, l := range locks {
			name := l.Name
			if l.Namespace != "" {
				name = l.Namespace + "/" + l.Name
			}
			if !match(name) {
				continue
			}
			lock := advisoryLockJSON{
				Name: name, Mode: l.Mode, Granted: l.Granted, WaitingMs: l.Waited.Milliseconds(), PID: l.PID,
				ApplicationName: l.ApplicationName, ClientAddr: l.ClientAddr, SessionAgeMs: l.SessionAge.Milliseconds(),
				BlockedBy: l.BlockedBy,
			}
			if id, ok := l.Key.Int64(); ok {
				lock.Key = &id
			} else {
				ns, minor := l.Key.Pair()
				lock.Pair = &[2]int32{ns, minor}
			}
			if lock.BlockedBy == nil {
				lock.BlockedBy = []int32{}
			}
			out.AdvisoryLocks = append(out.AdvisoryLocks, lock)
		}
	}
	return out, nil
}

// globMatcher matches whole names against pattern, where * is any text (slashes included:
// names are not paths) and ? one character.
func globMatcher(pattern string) func(string) bool {
	quoted := regexp.QuoteMeta(pattern)
	quoted = strings.NewReplacer(`\*`, ".*", `\?`, ".").Replace(quoted)
	re := regexp.MustCompile("^(?s:" + quoted + ")$")
	return re.MatchString
}
