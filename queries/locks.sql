-- sqlc cannot see the columns of a function that RETURNS TABLE, so they are named and cast here.

-- AcquireLock answers a try (not @wait) on a lock someone else holds from a plain read of its
-- row, the cost of a primary-key lookup; only otherwise does it call pglock_acquire, whose
-- answer for that case is the same. The read's condition is not correlated with the function
-- scan, so PostgreSQL gates the scan with it and never runs the function when it holds.
-- An acquisition commits durably; anything else commits without waiting for the WAL flush:
-- the only other write is a waiter's place in the queue, and a place lost in a crash is
-- written again at the waiter's next poll (a handoff to it commits durably, flushing it too).
-- name: AcquireLock :one
WITH held AS (
    SELECT l.holder_id, l.instance, l.fencing_token, l.acquired_at, l.expires_at, l.metadata
      FROM distributed_locks l
     WHERE l.lock_name = @lock_name AND l.holder_id <> @holder_id
       AND l.expires_at > clock_timestamp() AND NOT @wait::boolean
), answer AS (
    SELECT false AS acquired, false AS queued, h.holder_id::varchar, h.instance::varchar,
           h.fencing_token, h.acquired_at, h.expires_at, h.metadata, clock_timestamp() AS checked_at
      FROM held h
    UNION ALL
    SELECT a.acquired, a.queued, a.holder_id, a.instance, a.fencing_token, a.acquired_at,
           a.expires_at, a.metadata, a.checked_at
      FROM pglock_acquire(@lock_name, @holder_id, @ttl_ms, @metadata, @instance, @wait::boolean) AS a
     WHERE NOT EXISTS (SELECT FROM held)
)
SELECT r.acquired::boolean          AS acquired,
       r.queued::boolean            AS queued,
       r.holder_id::varchar         AS holder_id,
       r.instance::varchar          AS instance,
       r.fencing_token::bigint      AS fencing_token,
       r.acquired_at::timestamptz   AS acquired_at,
       r.expires_at::timestamptz    AS expires_at,
       r.metadata::jsonb            AS metadata,
       r.checked_at::timestamptz    AS checked_at,
       set_config('synchronous_commit',
                  CASE WHEN r.acquired THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)             AS synchronous_commit
  FROM answer r;

-- ExtendLock returns no row (pgx.ErrNoRows) when the lock is not held.
-- name: ExtendLock :one
SELECT e.expires_at::timestamptz AS expires_at
  FROM extend_lock_ms(@lock_name, @holder_id, @ttl_ms) AS e(expires_at)
 WHERE e.expires_at IS NOT NULL;

-- ReleaseLock commits asynchronously (synchronous_commit off, set here because a function's
-- own SET clause would undo it on return) unless it handed the lock to a waiter: a lost
-- release only keeps the lock until it expires, a lost handoff could let two holders in.
-- name: ReleaseLock :one
SELECT r.released::boolean   AS released,
       r.handed_off::boolean AS handed_off,
       set_config('synchronous_commit',
                  CASE WHEN r.handed_off THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)      AS synchronous_commit
  FROM pglock_release(@lock_name, @holder_id) AS r;

-- name: VerifyFence :one
SELECT verify_fence(@lock_name, @fencing_token) AS held;
