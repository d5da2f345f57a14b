package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// consistent is evidence of a run in which every guarantee held: two critical sections one
// after the other, each write after its grant, ticks each accounted for and run at most once,
// a job done once, two terms, and every workload at work after the faults ended. Rows are
// inserted in the order they would have committed.
const consistent = `
INSERT INTO chaos_marks (mark, at) VALUES ('faults_ended', '2026-11-24 10:00:00'), ('stopping', '2026-11-24 10:00:10'),
	('stopped', '2026-11-24 10:00:12');
INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at)
	VALUES ('pglock.semaphore/chaos-global/expired', 'h', 39, '2026-11-24 10:00:08', '2026-11-24 10:00:11');
INSERT INTO chaos_grants (name, token, at) VALUES ('section-0', 1, '2026-11-24 09:59:59');
INSERT INTO chaos_writes (name, token, worker, kind, at) VALUES
	('section-0', 1, 'w1.0', 'enter', '2026-11-24 10:00:01'), ('section-0', 1, 'w1.0', 'write', '2026-11-24 10:00:01.5'),
	('section-0', 1, 'w1.0', 'leave', '2026-11-24 10:00:02'), ('section-0', 1, 'w1.0', 'stale', '2026-11-24 10:00:02.5');
INSERT INTO chaos_grants (name, token, at) VALUES ('section-0', 2, '2026-11-24 10:00:02.8');
INSERT INTO chaos_writes (name, token, worker, kind, at) VALUES
	('section-0', 2, 'w2.0', 'enter', '2026-11-24 10:00:03'), ('section-0', 2, 'w2.0', 'leave', '2026-11-24 10:00:04');
INSERT INTO chaos_grants (name, token) VALUES ('pglock.leader/chaos-leader', 1);
INSERT INTO chaos_leader_writes (term, worker, stale, at) VALUES (1, 'w1.0', false, '2026-11-24 10:00:01');
INSERT INTO chaos_grants (name, token) VALUES ('pglock.leader/chaos-leader', 2);
INSERT INTO chaos_leader_writes (term, worker, stale, at) VALUES (2, 'w2.0', false, '2026-11-24 10:00:05'), (2, 'w2.0', false, '2026-11-24 10:00:06');
INSERT INTO pglock_cron_schedules (name, spec, time_zone, overlap, catch_up, catch_up_window_ms, keep_for_ms,
		keep_runs, accounted_until, last_instance, last_seen_at, created_at)
	VALUES ('chaos-tick', '@every 1s', 'UTC', 'skip', 'all', 1000, 1000, 10, now(), 'w1', now(), now());
INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, fencing_token, created_at) VALUES
	('chaos-tick', '2026-11-24 10:00:00', 'scheduled', 'ran', 1, 10, now()),
	('chaos-tick', '2026-11-24 10:00:01', 'catch_up', 'ran', 1, 11, now()),
	('chaos-tick', '2026-11-24 10:00:02', 'scheduled', 'abandoned', 1, 12, now()),
	('chaos-tick', '2026-11-24 10:00:03', 'scheduled', 'skipped', 1, NULL, now()),
	('chaos-tick', '2026-11-24 10:00:04', 'scheduled', 'ran', 1, 13, now());
INSERT INTO chaos_ticks (tick, worker, token) VALUES
	('2026-11-24 10:00:00', 'w1.0', 10), ('2026-11-24 10:00:01', 'w2.0', 11), ('2026-11-24 10:00:04', 'w2.0', 13);
INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token, started_at, retain_until, created_at)
	VALUES ('', 'job-1', 'succeeded', 'h', 'w1', 1, 1, now(), now() + interval '1 day', now());
INSERT INTO chaos_effects (key, worker, at) VALUES ('job-1', 'w1.0', '2026-11-24 10:00:05');
INSERT INTO chaos_places (token, tenant, worker, kind, at) VALUES
	(21, 'tenant-0', 'w1.0', 'enter', '2026-11-24 10:00:06'), (22, 'tenant-1', 'w2.0', 'enter', '2026-11-24 10:00:06'),
	(21, 'tenant-0', 'w1.0', 'leave', '2026-11-24 10:00:07'), (23, 'tenant-0', 'w2.0', 'enter', '2026-11-24 10:00:07'),
	(22, 'tenant-1', 'w2.0', 'leave', '2026-11-24 10:00:08'), (23, 'tenant-0', 'w2.0', 'leave', '2026-11-24 10:00:08');`

// TestCheckerFindsEachViolation pins the checker to the evidence: consistent evidence passes,
// and each kind of violation, added to it, is counted under its own name (a check that cannot
// fail proves nothing).
func TestCheckerFindsEachViolation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, violation, sql string
	}{
		{"consistent evidence", "", ""},
		// Overlapping sections whose grants went unlogged: the overlap alone must show.
		{"sections that overlap", "overlapping sections", `
			INSERT INTO chaos_writes (name, token, worker, kind) VALUES
				('section-1', 5, 'w1.0', 'enter'), ('section-1', 6, 'w2.0', 'enter'),
				('section-1', 5, 'w1.0', 'leave'), ('section-1', 6, 'w2.0', 'leave')`},
		{"a stale write after a newer grant, before the new holder wrote", "stale lock writes accepted", `
			INSERT INTO chaos_grants (name, token) VALUES ('section-0', 3);
			INSERT INTO chaos_writes (name, token, worker, kind, at) VALUES ('section-0', 2, 'w2.0', 'stale', '2026-11-24 10:00:04.5')`},
		{"a tick run twice", "cron ticks run twice", `
			INSERT INTO chaos_ticks (tick, worker, token) VALUES ('2026-11-24 10:00:00', 'w3.0', 10)`},
		{"a tick with no run while the schedulers lived", "cron ticks missed", `
			DELETE FROM pglock_cron_runs WHERE scheduled_time = '2026-11-24 10:00:03'`},
		{"a tick recorded missed", "cron ticks missed", `
			INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
				VALUES ('chaos-tick', '2026-11-24 10:00:05', 'scheduled', 'missed', 1, now())`},
		{"a run recorded ran whose effect is missing", "cron runs recorded ran without their effect", `
			UPDATE pglock_cron_runs SET status = 'ran' WHERE status = 'abandoned'`},
		{"a job's effect twice", "job effects twice", `
			INSERT INTO chaos_effects (key, worker) VALUES ('job-1', 'w2.0')`},
		{"a job's effect without its record", "job effects without their record, or records without their effect", `
			INSERT INTO chaos_effects (key, worker) VALUES ('job-2', 'w2.0')`},
		{"a job's record without its effect", "job effects without their record, or records without their effect", `
			INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token, started_at, retain_until, created_at)
				VALUES ('', 'job-3', 'succeeded', 'h', 'w1', 1, 2, now(), now() + interval '1 day', now())`},
		{"an old leader's write after a new leader's election", "leader writes after a newer leader's election", `
			INSERT INTO chaos_grants (name, token) VALUES ('pglock.leader/chaos-leader', 3);
			INSERT INTO chaos_leader_writes (term, worker, stale) VALUES (2, 'w2.0', true)`},
		{"three inside a semaphore of two places", "semaphore places over their limit", `
			INSERT INTO chaos_places (token, tenant, worker, kind) VALUES
				(31, 'tenant-2', 'w1.0', 'enter'), (32, 'tenant-3', 'w2.0', 'enter'), (33, 'tenant-4', 'w3.0', 'enter'),
				(31, 'tenant-2', 'w1.0', 'leave'), (32, 'tenant-3', 'w2.0', 'leave'), (33, 'tenant-4', 'w3.0', 'leave')`},
		{"a tenant twice inside with a cap of one", "semaphore places over their limit", `
			INSERT INTO chaos_places (token, tenant, worker, kind) VALUES
				(31, 'tenant-2', 'w1.0', 'enter'), (32, 'tenant-2', 'w2.0', 'enter'),
				(31, 'tenant-2', 'w1.0', 'leave'), (32, 'tenant-2', 'w2.0', 'leave')`},
		{"a place live after the workers stopped", "semaphore places or queue places left live after the workers stopped", `
			INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at)
				VALUES ('pglock.semaphore/chaos-global/h', 'h', 40, '2026-11-24 10:00:09', '2026-11-24 10:00:13')`},
		{"a workload idle after the last fault", "workloads that did not recover after the last fault", `
			UPDATE chaos_leader_writes SET at = '2026-11-24 09:00:00'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			ctx := context.Background()
			_, err := d.Pool.Exec(ctx, evidenceSchema+consistent)
			require.NoError(t, err)
			if tc.sql != "" {
				_, err = d.Pool.Exec(ctx, tc.sql)
				require.NoError(t, err)
			}
			s, err := check(ctx, d.Pool)
			require.NoError(t, err)
			want := map[string]int{}
			if tc.violation != "" {
				want[tc.violation] = 1
			}
			require.Equal(t, want, s.violations)
		})
	}
}
