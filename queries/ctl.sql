-- What pglockctl reads and does. Times are the database's: now is its clock_timestamp().

-- ListTableLocks lists the table locks in name order, or with @lock_name only that one; with
-- @name_like those whose names are LIKE it, after @after (keyset pagination), @max_rows at most.
-- name: ListTableLocks :many
SELECT l.lock_name::varchar          AS lock_name,
       l.holder_id::varchar          AS holder_id,
       l.instance::varchar           AS instance,
       l.fencing_token::bigint       AS fencing_token,
       l.acquired_at::timestamptz    AS acquired_at,
       l.expires_at::timestamptz     AS expires_at,
       l.metadata::jsonb             AS metadata,
       l.places::integer             AS places,
       l.semaphore_key::varchar      AS semaphore_key,
       (SELECT count(*) FROM distributed_lock_waiters w
         WHERE w.lock_name = l.lock_name AND w.expires_at > clock_timestamp())::bigint AS waiters
  FROM distributed_locks l
 WHERE (sqlc.narg('lock_name')::varchar IS NULL OR l.lock_name = sqlc.narg('lock_name'))
   AND (sqlc.narg('name_like')::text IS NULL OR l.lock_name LIKE sqlc.narg('name_like'))
   AND (sqlc.narg('after')::varchar IS NULL OR l.lock_name > sqlc.narg('after'))
 ORDER BY l.lock_name
 LIMIT @max_rows;

-- LockCounts counts the table locks, those expired (awaiting gc) and the live waiters, and
-- finds the oldest holding, in one statement.
-- name: LockCounts :one
SELECT (SELECT count(*) FROM distributed_locks)::bigint AS locks,
       (SELECT count(*) FROM distributed_locks WHERE expires_at <= clock_timestamp())::bigint AS expired,
       (SELECT count(*) FROM distributed_lock_waiters WHERE expires_at > clock_timestamp())::bigint AS waiters,
       coalesce((SELECT lock_name FROM distributed_locks ORDER BY acquired_at LIMIT 1), '')::varchar AS oldest_name,
       coalesce((SELECT min(acquired_at) FROM distributed_locks), clock_timestamp())::timestamptz AS oldest_acquired_at,
       clock_timestamp()::timestamptz AS now;

-- name: ForceReleaseLock :one
SELECT f.holder_id::varchar AS holder_id, f.instance::varchar AS instance,
       f.fencing_token::bigint AS fencing_token, f.expires_at::timestamptz AS expires_at,
       f.handed_off::boolean AS handed_off
  FROM force_release_lock(@lock_name) AS f;

-- name: CollectGarbage :one
SELECT g.expired_locks::bigint AS expired_locks, g.expired_waiters::bigint AS expired_waiters
  FROM pglock_gc() AS g;

-- TerminateBackend ends a backend and waits (up to 5 s) until it is gone, with its locks.
-- name: TerminateBackend :one
SELECT pg_terminate_backend(@pid::integer, 5000) AS terminated;

-- name: DatabaseNow :one
SELECT clock_timestamp()::timestamptz AS now;

-- ListInstances lists the scheduler instances seen since @since, with their clock offsets.
-- name: ListInstances :many
SELECT i.instance, i.clock_offset_us, i.uncertainty_us, i.seen_at
  FROM pglock_instances i
 WHERE i.seen_at >= @since
 ORDER BY i.instance;

-- ListLockWaiters lists a lock's live waiters in queue order (a semaphore's: by turn, then
-- arrival; a lock's waiters all have turn 0).
-- name: ListLockWaiters :many
SELECT w.holder_id::varchar AS holder_id, w.instance::varchar AS instance, w.enqueued_at, w.expires_at, w.metadata::jsonb AS metadata,
       w.places::integer AS places, w.semaphore_key::varchar AS semaphore_key
  FROM distributed_lock_waiters w
 WHERE w.lock_name = @lock_name AND w.expires_at > clock_timestamp()
 ORDER BY w.turn, w.waiter_seq;

-- LockTokenForUpdate reads a lock's token and locks its row until the transaction ends, so that
-- a force-release in the same transaction releases the holding the caller saw, or nothing.
-- name: LockTokenForUpdate :one
SELECT l.fencing_token FROM distributed_locks l WHERE l.lock_name = @lock_name FOR UPDATE;

-- Counts estimates how many job records there are, from the planner's statistics (-1 before
-- the table was first analyzed): a page that refreshes every few seconds must not count a
-- table of millions.
-- name: Counts :one
SELECT c.reltuples::bigint AS jobs_estimate FROM pg_catalog.pg_class c WHERE c.oid = 'pglock_jobs'::regclass;

-- DoctorRows counts what pglockctl doctor looks at in the lock tables: rows and queue places
-- expired more than @grace_ms ago (awaiting gc), and the elections whose leadership has had no
-- live holder for @grace_ms while candidates wait (their lock rows are pglock.leader/<name>).
-- name: DoctorRows :one
SELECT (SELECT count(*) FROM distributed_locks l
         WHERE l.expires_at <= clock_timestamp() - (sqlc.arg('grace_ms')::bigint * interval '1 millisecond'))::bigint AS expired_locks,
       (SELECT count(*) FROM distributed_lock_waiters w
         WHERE w.expires_at <= clock_timestamp() - (sqlc.arg('grace_ms')::bigint * interval '1 millisecond'))::bigint AS expired_waiters,
       coalesce((SELECT array_agg(DISTINCT substr(w.lock_name, 15))
                   FROM distributed_lock_waiters w
                  WHERE w.lock_name LIKE 'pglock.leader/%' AND w.expires_at > clock_timestamp()
                    AND w.enqueued_at <= clock_timestamp() - (sqlc.arg('grace_ms')::bigint * interval '1 millisecond')
                    AND NOT EXISTS (SELECT 1 FROM distributed_locks l
                                     WHERE l.lock_name = w.lock_name
                                       AND l.expires_at > clock_timestamp() - (sqlc.arg('grace_ms')::bigint * interval '1 millisecond'))),
                '{}')::varchar[] AS leaderless;

-- DoctorTimeouts is the session's statement_timeout and idle_in_transaction_session_timeout, in
-- milliseconds (0: none), as the role and database pglockctl connects with set them, and that role.
-- name: DoctorTimeouts :one
SELECT current_user::varchar AS role,
       (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint AS statement_timeout_ms,
       (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint AS idle_timeout_ms;

-- DoctorStatistics lists pglock's tables whose planner statistics say empty (reltuples 0: an
-- ANALYZE ran while they were) though they hold more than 8 pages now: a claim or a poll planned
-- on such statistics may scan the whole table.
-- name: DoctorStatistics :many
SELECT c.relname::varchar AS table_name, (pg_relation_size(c.oid) / current_setting('block_size')::bigint)::bigint AS pages
  FROM pg_catalog.pg_class c
 WHERE c.relkind = 'r' AND c.relnamespace = to_regnamespace(current_schema())::oid
   AND c.relname IN ('distributed_locks', 'distributed_lock_waiters', 'pglock_jobs', 'pglock_cron_runs', 'pglock_cron_schedules',
                     'pglock_job_debounces', 'pglock_rate_limits_durable', 'pglock_rate_limits_unlogged')
   AND c.reltuples = 0 AND pg_relation_size(c.oid) > 8 * current_setting('block_size')::bigint
 ORDER BY c.relname;

-- DoctorAdvisory lists the sessions of this database holding an advisory lock while idle for
-- at least @held_ms: each has held it that long at least (PostgreSQL does not record when a
-- lock was granted; an idle session's last statement ended at state_change).
-- name: DoctorAdvisory :many
SELECT a.pid::integer AS pid, coalesce(a.application_name, '')::varchar AS application_name,
       count(*)::bigint AS locks, (extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint AS idle_ms
  FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
   AND a.state IN ('idle', 'idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - sqlc.arg('held_ms')::bigint * interval '1 millisecond'
 GROUP BY a.pid, a.application_name, a.state_change
 ORDER BY a.state_change;

-- DoctorPrivileges says, of each function and table given, whether it exists and whether the
-- current role may execute or read it.
-- name: DoctorPrivileges :many
SELECT f::varchar AS object, (to_regprocedure(f) IS NOT NULL)::boolean AS present,
       coalesce(has_function_privilege(to_regprocedure(f), 'EXECUTE'), false)::boolean AS granted
  FROM unnest(@functions::text[]) AS f
UNION ALL
SELECT t::varchar, to_regclass(t) IS NOT NULL, coalesce(has_table_privilege(to_regclass(t), 'SELECT'), false)
  FROM unnest(@tables::text[]) AS t;

-- DoctorClientPort is the client port the server sees this connection come from (0 over a
-- Unix socket).
-- name: DoctorClientPort :one
SELECT coalesce(inet_client_port(), 0)::integer AS port;
