-- sqlc cannot see the columns of what a function returns, so they are named and cast here.

-- TryAcquireLock answers a try on a lock someone else holds from a plain read of its row, the
-- cost of a primary-key lookup; only otherwise does it call pglock_attempt, whose answer for
-- that case is the same. coalesce evaluates the call only when the read finds no live holder,
-- and a call inside an expression costs nothing to set up, unlike a function in FROM. OFFSET 0
-- keeps the answer from being computed once per column. A free lock kept for a waiter has no
-- token yet: 0 then (the token of an answer that is not an acquisition means nothing).
-- name: TryAcquireLock :one
SELECT (a).acquired::boolean                  AS acquired,
       (a).holder_id::varchar                 AS holder_id,
       (a).instance::varchar                  AS instance,
       coalesce((a).fencing_token, 0)::bigint AS fencing_token,
       (a).expires_at::timestamptz            AS expires_at,
       (a).metadata::jsonb                    AS metadata
  FROM (SELECT coalesce(
                   (SELECT ROW(false, false, l.holder_id, l.instance, l.fencing_token, l.acquired_at,
                               l.expires_at, l.metadata, clock_timestamp())::pglock_acquisition
                      FROM distributed_locks l
                     WHERE l.lock_name = @lock_name AND l.holder_id <> @holder_id
                       AND l.expires_at > clock_timestamp()),
                   pglock_attempt(@lock_name, @holder_id, @ttl_ms, @metadata, @instance, false)) AS a
        OFFSET 0) AS attempt;

-- PollLock is a waiter's try: it takes the lock if the waiter's turn has come, else writes (or
-- keeps) its place in the queue. Only an acquisition waits for the WAL flush: a place lost in a
-- crash is written again at the waiter's next poll, and a handoff to it commits durably,
-- flushing it too. (A function's own SET clause would undo set_config on return: it is here.)
-- As in TryAcquireLock, the token is 0 when the answer is a reservation for another waiter.
-- name: PollLock :one
SELECT a.acquired::boolean                  AS acquired,
       a.queued::boolean                    AS queued,
       a.holder_id::varchar                 AS holder_id,
       a.instance::varchar                  AS instance,
       coalesce(a.fencing_token, 0)::bigint AS fencing_token,
       a.expires_at::timestamptz            AS expires_at,
       a.metadata::jsonb                    AS metadata,
       a.checked_at::timestamptz            AS checked_at,
       set_config('synchronous_commit',
                  CASE WHEN a.acquired THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)                     AS synchronous_commit
  FROM pglock_attempt(@lock_name, @holder_id, @ttl_ms, @metadata, @instance, true) AS a;

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

-- ReleaseLockAfter releases as ReleaseLock does once the holder has held the lock for held_ms,
-- else moves its lease's end to that moment (expires_at, else the epoch); committed synchronously, since a lost
-- commit would leave the lease to end sooner.
-- name: ReleaseLockAfter :one
SELECT r.released::boolean   AS released,
       r.handed_off::boolean AS handed_off,
       coalesce(r.expires_at, 'epoch')::timestamptz AS expires_at
  FROM pglock_release_after(@lock_name, @holder_id, @held_ms) AS r;

-- FenceLock verifies, and keeps until the transaction ends, that the lock is held with the
-- token, and bounds the transaction (see pglock_fence): it returns the lease's expiry, or no
-- row (pgx.ErrNoRows) when the lock is not held with the token.
-- name: FenceLock :one
SELECT f.expires_at::timestamptz AS expires_at
  FROM pglock_fence(@lock_name, @fencing_token, @grace_ms) AS f(expires_at)
 WHERE f.expires_at IS NOT NULL;

-- TakeSemaphore is a semaphore's try (wait false) or poll (wait true): see
-- pglock_semaphore_take (a per_key of 0: no cap). As PollLock, only an acquisition waits for
-- the WAL flush.
-- name: TakeSemaphore :one
SELECT a.acquired::boolean                               AS acquired,
       coalesce(a.fencing_token, 0)::bigint              AS fencing_token,
       coalesce(a.expires_at, clock_timestamp())::timestamptz AS expires_at,
       a.holders::integer                                AS holders,
       coalesce(a.next_holder_ids, '{}')::varchar[]      AS next_holder_ids,
       set_config('synchronous_commit',
                  CASE WHEN a.acquired THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)                                  AS synchronous_commit
  FROM pglock_semaphore_take(@semaphore, @holder_id, @places, @permits, @key, nullif(@per_key::integer, 0), @ttl_ms,
                             @metadata, @instance, @wait) AS a;

-- RenewLocks renews many locks in one statement (pglock_renew_many): a row per lock, in the
-- order given, with its outcome ('renewed', 'busy' or 'gone').
-- name: RenewLocks :many
SELECT r.outcome::text                               AS outcome,
       coalesce(r.expires_at, 'epoch')::timestamptz AS expires_at
  FROM pglock_renew_many(@lock_names::varchar[], @holder_ids::varchar[], @ttl_ms::bigint[]) AS r;

-- WaitMany keeps many waiters' places in one statement (pglock_wait_many): a row per waiter, in
-- the order given: its place kept (with its new expiry) or gone, and the lock's holder and
-- expiry ('' and the epoch when there is no lock row).
-- name: WaitMany :many
SELECT r.outcome::text                                    AS outcome,
       coalesce(r.expires_at, 'epoch')::timestamptz      AS expires_at,
       coalesce(r.lock_holder_id, '')::varchar            AS lock_holder_id,
       coalesce(r.lock_expires_at, 'epoch')::timestamptz AS lock_expires_at,
       r.checked_at::timestamptz                          AS checked_at
  FROM pglock_wait_many(@lock_names::varchar[], @holder_ids::varchar[], @ttl_ms::bigint[]) AS r;

-- TakeAll is a combined acquisition's try (wait false) or poll (wait true): see pglock_take_all.
-- A place count of 0 is a lock's, a per_key of 0 no cap. As PollLock, only an acquisition, or a
-- poll that handed a lock on, waits for the WAL flush.
-- name: TakeAll :one
SELECT a.acquired::boolean                               AS acquired,
       coalesce(a.waiting_for, '')::varchar              AS waiting_for,
       coalesce(a.lock_names, '{}')::varchar[]           AS lock_names,
       coalesce(a.fencing_tokens, '{}')::bigint[]        AS fencing_tokens,
       coalesce(a.expires_at, clock_timestamp())::timestamptz AS expires_at,
       coalesce(a.next_holder_ids, '{}')::varchar[]      AS next_holder_ids,
       set_config('synchronous_commit',
                  CASE WHEN a.acquired OR a.handed_on THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)                                  AS synchronous_commit
  FROM pglock_take_all(@holder_id, @names::varchar[],
                       (SELECT array_agg(nullif(u.v, 0) ORDER BY u.o) FROM unnest(@places::integer[]) WITH ORDINALITY AS u(v, o)),
                       @permits::integer[], @keys::varchar[],
                       (SELECT array_agg(nullif(u.v, 0) ORDER BY u.o) FROM unnest(@per_keys::integer[]) WITH ORDINALITY AS u(v, o)),
                       @ttl_ms, @metadata, @instance, @wait) AS a;

-- ReleaseAll releases, in one statement, the rows and queue places holder_id has among
-- lock_names (in the order given: the canonical one), as ReleaseLock does each, and counts
-- those it held; as ReleaseLock, it waits for the WAL flush only if it handed a lock over.
-- name: ReleaseAll :one
SELECT count(*) FILTER (WHERE r.released)::integer AS released,
       set_config('synchronous_commit',
                  CASE WHEN bool_or(r.handed_off) THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true)                         AS synchronous_commit
  FROM unnest(@lock_names::varchar[]) WITH ORDINALITY AS n(lock_name, o)
 CROSS JOIN LATERAL pglock_release(n.lock_name, @holder_id) AS r;

-- FenceAll is FenceLock of several rows, in the order given (the canonical one): it counts
-- those held with their tokens, each kept so until the transaction ends.
-- name: FenceAll :one
SELECT count(f.expires_at)::integer AS fenced
  FROM unnest(@lock_names::varchar[]) WITH ORDINALITY AS n(lock_name, o)
 CROSS JOIN LATERAL pglock_fence(n.lock_name, (@fencing_tokens::bigint[])[n.o], @grace_ms) AS f(expires_at);
