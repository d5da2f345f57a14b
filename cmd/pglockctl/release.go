package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/ops"
)

// errNotConfirmed ends a release that only showed what it would do.
var errNotConfirmed = errors.New("nothing done: run again with --force (table lock) or --terminate (advisory lock)")

func (a *app) releaseCommand() *cobra.Command {
	var force, terminate bool
	var advisoryKey, namespace string
	cmd := &cobra.Command{
		Use:   "release (NAME --force | --advisory KEY|NAME --terminate)",
		Short: "Release a stuck lock: show what would be released, and do it with --force / --terminate",
		Long: "release NAME deletes the table lock NAME whoever holds it: the next waiter gets it with a higher " +
			"token, or waiters are woken. release --advisory KEY|NAME ends the backend that holds the advisory lock " +
			"(KEY: a bigint, or NS,ID for a pair; NAME: a name, with --namespace if it has one). Without --force or " +
			"--terminate it only shows what it would release, and exits with 1.",
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, arguments []string) error {
			switch {
			case advisoryKey != "" && len(arguments) > 0:
				return usagef("give either NAME or --advisory, not both")
			case advisoryKey != "" && force:
				return usagef("--force is for table locks; advisory locks take --terminate")
			case advisoryKey == "" && len(arguments) == 0:
				return usagef("give the NAME of a table lock, or --advisory KEY|NAME")
			case advisoryKey == "" && terminate:
				return usagef("--terminate is for advisory locks; table locks take --force")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				if advisoryKey != "" {
					return a.releaseAdvisory(ctx, pool, parseKey(advisoryKey, namespace), terminate)
				}
				return a.releaseTable(ctx, pool, arguments[0], force)
			})
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "really delete the table lock")
	cmd.Flags().StringVar(&advisoryKey, "advisory", "", "the advisory lock: a bigint KEY, NS,ID, or a NAME")
	cmd.Flags().StringVar(&namespace, "namespace", "", "the namespace of an advisory NAME")
	cmd.Flags().BoolVar(&terminate, "terminate", false, "really end the backend holding the advisory lock")
	return cmd
}

func (a *app) releaseTable(ctx context.Context, pool *pgxpool.Pool, name string, force bool) error {
	if err := pglock.ValidateName(name); err != nil {
		return usageError{err}
	}
	locks, err := ops.ListLocks(ctx, pool, ops.LockFilter{Kind: ops.KindTable, Only: &name})
	if err != nil {
		return err
	}
	if len(locks.TableLocks) == 0 {
		return fmt.Errorf("%w: no table lock named %q", pglock.ErrNotHeld, name)
	}
	l := locks.TableLocks[0]
	if !force {
		fmt.Fprintf(a.stdout, "would release %q held by %s (%s), token %d, expires %s\n",
			l.Name, l.Holder, orDash(l.Instance), l.Token, timestamp(l.ExpiresAt, locks.Now))
		return errNotConfirmed
	}
	released, err := ops.ForceRelease(ctx, pool, name, &l.Token)
	if err != nil {
		return err
	}
	next := "waiters woken"
	if released.HandedOff {
		next = "handed to the next waiter"
	}
	fmt.Fprintf(a.stdout, "released %q from %s (%s), token %d; %s\n",
		name, released.Holder, orDash(released.Instance), released.Token, next)
	return nil
}

func (a *app) releaseAdvisory(ctx context.Context, pool *pgxpool.Pool, key advisory.Key, terminate bool) error {
	holders, err := ops.AdvisoryHolders(ctx, pool, key)
	if err != nil {
		return err
	}
	if len(holders) == 0 {
		return fmt.Errorf("%w: nobody holds %s", pglock.ErrNotHeld, key)
	}
	for _, h := range holders {
		if !terminate {
			fmt.Fprintf(a.stdout, "would end backend %d (%s, %s), which holds %s %s\n",
				h.PID, orDash(h.ApplicationName), orDash(h.ClientAddr), key, h.Mode)
			continue
		}
		if err := ops.Terminate(ctx, pool, h.PID); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "ended backend %d (%s, %s), which held %s %s\n",
			h.PID, orDash(h.ApplicationName), orDash(h.ClientAddr), key, h.Mode)
	}
	if !terminate {
		return errNotConfirmed
	}
	return nil
}

// parseKey reads --advisory: a key as ops.ParseAdvisoryKey reads it, or else (and always with a
// namespace) a name.
func parseKey(s, namespace string) advisory.Key {
	if namespace == "" {
		if key, err := ops.ParseAdvisoryKey(s); err == nil {
			return key
		}
	}
	return ops.AdvisoryName(namespace, s)
}
