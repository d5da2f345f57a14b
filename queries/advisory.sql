-- Advisory locks. A key is either one bigint (@key) or, with @pair, two ints (@ns, @id):
-- PostgreSQL keeps the two key spaces apart. @shared picks the shared mode. CASE evaluates
-- only the branch it picks, so each statement takes or frees exactly one lock.

-- name: AdvisoryLock :exec
SELECT CASE
    WHEN @pair::boolean AND @shared::boolean THEN pg_advisory_lock_shared(@ns::int, @id::int)
    WHEN @pair::boolean                      THEN pg_advisory_lock(@ns::int, @id::int)
    WHEN @shared::boolean                    THEN pg_advisory_lock_shared(@key::bigint)
    ELSE pg_advisory_lock(@key::bigint)
END;

-- A session's try and unlock, the hot path, have a statement per form of key and mode rather
-- than a CASE over five parameters: binding them and evaluating the CASE cost about 5% of a
-- try+unlock pair on one connection (docs/advisory.md, "Cost").

-- name: AdvisoryTryLock :one
SELECT pg_try_advisory_lock(@key::bigint) AS acquired;

-- name: AdvisoryTryLockShared :one
SELECT pg_try_advisory_lock_shared(@key::bigint) AS acquired;

-- name: AdvisoryTryLockPair :one
SELECT pg_try_advisory_lock(@ns::int, @id::int) AS acquired;

-- name: AdvisoryTryLockPairShared :one
SELECT pg_try_advisory_lock_shared(@ns::int, @id::int) AS acquired;

-- name: AdvisoryUnlock :one
SELECT pg_advisory_unlock(@key::bigint) AS released;

-- name: AdvisoryUnlockShared :one
SELECT pg_advisory_unlock_shared(@key::bigint) AS released;

-- name: AdvisoryUnlockPair :one
SELECT pg_advisory_unlock(@ns::int, @id::int) AS released;

-- name: AdvisoryUnlockPairShared :one
SELECT pg_advisory_unlock_shared(@ns::int, @id::int) AS released;

-- name: AdvisoryUnlockAll :exec
SELECT pg_advisory_unlock_all();

-- name: AdvisoryXactLock :exec
SELECT CASE
    WHEN @pair::boolean AND @shared::boolean THEN pg_advisory_xact_lock_shared(@ns::int, @id::int)
    WHEN @pair::boolean                      THEN pg_advisory_xact_lock(@ns::int, @id::int)
    WHEN @shared::boolean                    THEN pg_advisory_xact_lock_shared(@key::bigint)
    ELSE pg_advisory_xact_lock(@key::bigint)
END;

-- name: AdvisoryTryXactLock :one
SELECT (CASE
    WHEN @pair::boolean AND @shared::boolean THEN pg_try_advisory_xact_lock_shared(@ns::int, @id::int)
    WHEN @pair::boolean                      THEN pg_try_advisory_xact_lock(@ns::int, @id::int)
    WHEN @shared::boolean                    THEN pg_try_advisory_xact_lock_shared(@key::bigint)
    ELSE pg_try_advisory_xact_lock(@key::bigint)
END)::boolean AS acquired;

-- SessionPing checks that a session's connection still answers.
-- name: SessionPing :exec
SELECT 1;

-- name: RegisterAdvisoryName :exec
SELECT register_advisory_name(@name::text, @namespace::text);

-- AdvisoryLocks lists the database's advisory locks. Absent values come back as '' or 0, and
-- times as durations on the database's clock: waited_ms is 0 for a granted lock, and
-- session_age_ms is -1 for a session the caller may not see (see advisory_locks()).
-- name: AdvisoryLocks :many
SELECT coalesce(l.lock_key, 0)::bigint        AS lock_key,
       l.pair::boolean                        AS pair,
       coalesce(l.pair_namespace, 0)::integer AS pair_namespace,
       coalesce(l.pair_id, 0)::integer        AS pair_id,
       coalesce(l.namespace, '')::text        AS namespace,
       coalesce(l.name, '')::text             AS name,
       l.mode::text                           AS mode,
       l.granted::boolean                     AS granted,
       coalesce(round(extract(epoch FROM clock_timestamp() - l.waiting_since) * 1000), 0)::bigint AS waited_ms,
       l.pid::integer                         AS pid,
       coalesce(l.application_name, '')::text AS application_name,
       coalesce(host(l.client_addr), '')::text AS client_addr,
       coalesce(round(extract(epoch FROM clock_timestamp() - l.backend_start) * 1000), -1)::bigint AS session_age_ms,
       l.blocked_by::integer[]                AS blocked_by
  FROM advisory_locks() AS l;

-- AdvisoryHeldBySession says whether this session holds the lock: a wait that ended in an
-- error (canceled, lock_timeout, deadlock) may still have been granted, and a session lock
-- outlives the aborted statement.
-- name: AdvisoryHeldBySession :one
SELECT pglock_session_holds_advisory(@pair::boolean, @shared::boolean, @ns::int, @id::int, @key::bigint) AS held;

-- BoundIdleInTransaction has the server end the session if the transaction stays idle for
-- @timeout_ms (SET LOCAL: for the rest of this transaction only).
-- name: BoundIdleInTransaction :exec
SELECT set_config('idle_in_transaction_session_timeout', format('%s', @timeout_ms::bigint), true);
