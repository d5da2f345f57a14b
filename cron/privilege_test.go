package cron_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

// The grants docs/sql.md lists are all a Scheduler, and an operator's controls, need: as a role
// that cannot write the tables, a scheduler registers, claims, runs, renews and records, and
// the controls pause, resume, trigger, backfill, list, read history and collect.
func TestSchedulerAndControlsWorkWithTheLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	app, ops := d.NewRole(t, "pglock_app"), d.NewRole(t, "pglock_ops")
	// Exactly what docs/sql.md grants each role.
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s, %[2]s;
		GRANT SELECT ON pglock_cron_schedules, pglock_cron_runs TO %[1]s;
		GRANT EXECUTE ON FUNCTION
			pglock_cron_register_extras(varchar, text, text, text, text, bigint, bigint, integer, varchar, bigint, timestamptz,
				timestamptz, integer, integer),
			pglock_cron_seen_clock(varchar[], varchar, bigint, bigint),
			pglock_cron_claim_reporting(varchar, varchar[], timestamptz[], timestamptz[], bigint[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[], boolean),
			pglock_cron_renew(bigint, bigint, bigint), pglock_cron_renew_many(bigint[], bigint[], bigint[]),
			pglock_cron_finish(bigint, bigint, text, text),
			pglock_cron_collect() TO %[1]s;
		GRANT SELECT ON pglock_cron_schedules, pglock_cron_runs, pglock_instances, pglock_cron_changes TO %[2]s;
		GRANT EXECUTE ON FUNCTION pglock_cron_pause(varchar, text, text), pglock_cron_resume(varchar),
			pglock_cron_trigger(varchar, text), pglock_cron_backfill(varchar, timestamptz[], text),
			pglock_cron_define(varchar, varchar, text, text, jsonb, text, text, bigint, bigint, integer, bigint, bigint, bigint,
				timestamptz, timestamptz, integer, integer, boolean, text, text), pglock_cron_delete(varchar, text, text),
			pglock_cron_collect() TO %[2]s;`, app, ops))
	require.NoError(t, err)
	as := func(role string) *pgxpool.Pool {
		return d.NewPool(t, func(c *pgxpool.Config) {
			c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SET ROLE "+role)
				return err
			}
		})
	}
	l := newLedger()
	start(t, as(app), nil, func(s *cron.Scheduler) {
		require.NoError(t, s.Add("hourly", "0 * * * *", &cron.Options{TTL: 3 * time.Second}, func(ctx context.Context, run cron.Run) error {
			// Until the role has renewed the run's lease once (a third of the TTL in): an error
			// is recorded as a failed run, and the wait for two runs that ran fails.
			if err := testdb.Moved(ctx, d.Pool, `SELECT lease_expires_at FROM pglock_cron_runs WHERE fencing_token = $1`, run.Token); err != nil {
				return err
			}
			return l.fn(ctx, run)
		}))
		require.NoError(t, s.Handle("k", l.fn))
	})
	opsPool := as(ops)
	_, err = cron.Trigger(ctx, opsPool, "hourly", "ops")
	require.NoError(t, err)
	require.Equal(t, cron.RunKindManual, l.next(t, "hourly").Kind)
	past := time.Now().UTC().Truncate(time.Hour).Add(-24 * time.Hour)
	n, err := cron.Backfill(ctx, opsPool, "hourly", past, past, "ops")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, cron.RunKindBackfill, l.next(t, "hourly").Kind)
	require.NoError(t, cron.Pause(ctx, opsPool, "hourly", "why", "ops"))
	require.NoError(t, cron.Resume(ctx, opsPool, "hourly"))
	list, err := cron.List(ctx, opsPool)
	require.NoError(t, err)
	require.Len(t, list, 1)
	testdb.WaitFor(t, func() bool { return statuses(history(t, opsPool, "hourly"))[cron.StatusRan] == 2 }, "two runs recorded")

	// A runtime schedule: defined, updated and deleted by the operators' role, run by the app's.
	def := cron.Definition{Name: "runtime", Kind: "k", Spec: "@hourly"}
	require.NoError(t, cron.Define(ctx, opsPool, def, &cron.Change{By: "ops"}))
	def.Spec = "@daily"
	require.NoError(t, cron.Update(ctx, opsPool, def, &cron.Change{By: "ops"}))
	testdb.WaitFor(t, func() bool { // the app's instance has read it: a manual run starts at once
		list, err := cron.List(ctx, opsPool)
		require.NoError(t, err)
		return len(list) == 2 && list[1].Name == "runtime" && !list[1].Unhandled
	}, "the app's instance handles it")
	_, err = cron.Trigger(ctx, opsPool, "runtime", "ops")
	require.NoError(t, err)
	require.Equal(t, cron.RunKindManual, l.next(t, "runtime").Kind)
	require.NoError(t, cron.Delete(ctx, opsPool, "runtime", &cron.Change{By: "ops"}))
	_, err = cron.Collect(ctx, opsPool)
	require.NoError(t, err)
}
