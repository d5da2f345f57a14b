-- Cron (package cron). sqlc cannot see the columns of what a function returns, so they are
-- named and cast here.

-- name: RegisterCronSchedule :one
SELECT pglock_cron_register_extras(@name, @spec, @time_zone, @overlap, @catch_up, @catch_up_window_ms,
                                   @keep_for_ms, @keep_runs, @instance, @jitter_ms, sqlc.narg('starts_at')::timestamptz,
                                   sqlc.narg('ends_at')::timestamptz, sqlc.narg('run_limit')::integer,
                                   sqlc.narg('pause_after_failures')::integer)::timestamptz AS accounted_until;

-- DefineCronSchedule defines a runtime schedule, or with replace changes one; it answers the
-- definition's revision.
-- name: DefineCronSchedule :one
SELECT pglock_cron_define(@name, @kind, @spec, @time_zone, sqlc.narg('args')::jsonb, @overlap, @catch_up,
                          @catch_up_window_ms, @keep_for_ms, @keep_runs, @ttl_ms, @timeout_ms, @jitter_ms,
                          sqlc.narg('starts_at')::timestamptz, sqlc.narg('ends_at')::timestamptz,
                          sqlc.narg('run_limit')::integer, sqlc.narg('pause_after_failures')::integer, @replace::boolean,
                          sqlc.narg('changed_by')::text, sqlc.narg('note')::text)::bigint AS revision;

-- name: DeleteCronSchedule :exec
SELECT pglock_cron_delete(@name, sqlc.narg('changed_by')::text, sqlc.narg('note')::text);

-- CronDefinitions reads the runtime schedules of the given kinds.
-- name: CronDefinitions :many
SELECT * FROM pglock_cron_schedules WHERE kind = ANY (@kinds::varchar[]) ORDER BY name;

-- CronDefinitionsVersion changes whenever a runtime schedule of the given kinds is defined,
-- changed or deleted: revisions come from one sequence.
-- name: CronDefinitionsVersion :one
SELECT count(*)::bigint AS schedules, coalesce(max(revision), 0)::bigint AS revision
  FROM pglock_cron_schedules WHERE kind = ANY (@kinds::varchar[]);

-- CronChanges lists the changes of a schedule's definition, newest first.
-- name: CronChanges :many
SELECT * FROM pglock_cron_changes WHERE schedule = @schedule ORDER BY id DESC LIMIT @max_rows;

-- SeenCronSchedules answers the names that have no schedule any more, and records this
-- instance's clock offset.
-- name: SeenCronSchedules :many
SELECT s::varchar AS name FROM pglock_cron_seen_clock(@names::varchar[], @instance, @offset_us::bigint, @uncertainty_us::bigint) AS s;

-- With report, the claim also returns the runs it recorded skipped or abandoned.
-- name: ClaimCronTicks :many
SELECT c.* FROM pglock_cron_claim_reporting(@instance, @names::varchar[], @seen::timestamptz[], @until::timestamptz[],
                                            @ttl_ms::bigint[], @revisions::bigint[], @tick_names::varchar[], @tick_times::timestamptz[],
                                            @tick_kinds::text[], @missed_until::timestamptz[], @missed_counts::bigint[],
                                            @report::boolean) AS c;

-- RenewCronRuns renews the leases of many runs in one statement (pglock_cron_renew_many): a row
-- per run, in the order given, with its outcome
-- ('renewed', 'busy' or 'gone').
-- name: RenewCronRuns :many
SELECT r.outcome::text                               AS outcome,
       coalesce(r.lease_expires_at, 'epoch')::timestamptz AS expires_at
  FROM pglock_cron_renew_many(@ids::bigint[], @fencing_tokens::bigint[], @ttl_ms::bigint[]) AS r;

-- FinishCronRun answers whether the schedule has pending runs; no row (pgx.ErrNoRows) when the
-- run was no longer running under its token.
-- name: FinishCronRun :one
SELECT f.pending::boolean AS pending
  FROM pglock_cron_finish(@id, @fencing_token, @status, sqlc.narg('error')::text) AS f(pending)
 WHERE f.pending IS NOT NULL;

-- name: CollectCronRuns :one
SELECT pglock_cron_collect()::bigint AS deleted;

-- name: PauseCronSchedule :exec
SELECT pglock_cron_pause(@name, sqlc.narg('note')::text, sqlc.narg('paused_by')::text);

-- name: ResumeCronSchedule :exec
SELECT pglock_cron_resume(@name);

-- name: TriggerCronSchedule :one
SELECT pglock_cron_trigger(@name, sqlc.narg('requested_by')::text)::bigint AS id;

-- name: BackfillCronSchedule :one
SELECT pglock_cron_backfill(@name, @ticks::timestamptz[], sqlc.narg('requested_by')::text)::integer AS queued;

-- GetCronRun reads one run (why a lease renewal failed: abandoned, or canceled by a newer run).
-- name: GetCronRun :one
SELECT * FROM pglock_cron_runs WHERE id = @id;

-- ListCronSchedules lists every schedule with its last run that started or was recorded
-- (NULLs when it has none).
-- name: ListCronSchedules :many
SELECT sqlc.embed(s), l.id AS last_run_id, l.scheduled_time AS last_scheduled_time, l.kind AS last_kind,
       l.status AS last_status, l.attempt AS last_attempt, l.instance AS last_instance_run,
       l.fencing_token AS last_token, l.started_at AS last_started_at, l.finished_at AS last_finished_at,
       l.error AS last_error, c.changed_by AS changed_by, c.changed_at AS changed_at, c.note AS change_note,
       clock_timestamp()::timestamptz AS db_now
  FROM pglock_cron_schedules s
  LEFT JOIN pglock_cron_runs l
    ON l.id = (SELECT r.id FROM pglock_cron_runs r WHERE r.schedule = s.name AND r.status <> 'pending'
                ORDER BY r.scheduled_time DESC, r.id DESC LIMIT 1)
  LEFT JOIN pglock_cron_changes c
    ON c.id = (SELECT x.id FROM pglock_cron_changes x WHERE x.schedule = s.name ORDER BY x.id DESC LIMIT 1)
 ORDER BY s.name;

-- name: GetCronSchedule :one
SELECT * FROM pglock_cron_schedules WHERE name = @name;

-- CronHistory lists a schedule's runs, newest tick first; with @before_time and @before_id,
-- those older than that run (keyset pagination).
-- name: CronHistory :many
SELECT * FROM pglock_cron_runs
 WHERE schedule = @schedule
   AND (sqlc.narg('before_time')::timestamptz IS NULL
        OR (scheduled_time, id) < (sqlc.narg('before_time'), sqlc.narg('before_id')::bigint))
 ORDER BY scheduled_time DESC, id DESC LIMIT @max_rows;
