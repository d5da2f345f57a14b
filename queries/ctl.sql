-- What pglockctl reads and does. Times are the database's: now is its clock_timestamp().

-- ListTableLocks lists the table locks, or with @lock_name only that one.
-- name: ListTableLocks :many
SELECT l.lock_name::varchar          AS lock_name,
       l.holder_id::varchar          AS holder_id,
       l.instance::varchar           AS instance,
       l.fencing_token::bigint       AS fencing_token,
       l.acquired_at::timestamptz    AS acquired_at,
       l.expires_at::timestamptz     AS expires_at,
       l.metadata::jsonb             AS metadata,
       (SELECT count(*) FROM distributed_lock_waiters w
         WHERE w.lock_name = l.lock_name AND w.expires_at > clock_timestamp())::bigint AS waiters
  FROM distributed_locks l
 WHERE sqlc.narg('lock_name')::varchar IS NULL OR l.lock_name = sqlc.narg('lock_name')
 ORDER BY l.lock_name;

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
