-- sqlc cannot see the columns of a function that RETURNS TABLE, so they are named and cast here.

-- name: AcquireLock :one
SELECT a.acquired::boolean          AS acquired,
       a.queued::boolean            AS queued,
       a.holder_id::varchar         AS holder_id,
       a.instance::varchar          AS instance,
       a.fencing_token::bigint      AS fencing_token,
       a.acquired_at::timestamptz   AS acquired_at,
       a.expires_at::timestamptz    AS expires_at,
       a.metadata::jsonb            AS metadata,
       a.checked_at::timestamptz    AS checked_at
  FROM pglock_acquire(@lock_name, @holder_id, @ttl_ms, @metadata, @instance, @wait) AS a;

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
