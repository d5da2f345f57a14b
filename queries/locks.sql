-- sqlc cannot see the columns of a function that RETURNS TABLE, so they are named and cast here.

-- name: AcquireLock :one
SELECT a.acquired::boolean          AS acquired,
       a.holder_id::varchar         AS holder_id,
       a.fencing_token::bigint      AS fencing_token,
       a.acquired_at::timestamptz   AS acquired_at,
       a.expires_at::timestamptz    AS expires_at,
       a.metadata::jsonb            AS metadata
  FROM acquire_lock_ms(@lock_name, @holder_id, @ttl_ms, @metadata) AS a;

-- ExtendLock returns no row (pgx.ErrNoRows) when the lock is not held.
-- name: ExtendLock :one
SELECT e.expires_at::timestamptz AS expires_at
  FROM extend_lock_ms(@lock_name, @holder_id, @ttl_ms) AS e(expires_at)
 WHERE e.expires_at IS NOT NULL;

-- name: ReleaseLock :one
SELECT release_lock(@lock_name, @holder_id) AS released;
