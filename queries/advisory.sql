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

-- name: AdvisoryTryLock :one
SELECT (CASE
    WHEN @pair::boolean AND @shared::boolean THEN pg_try_advisory_lock_shared(@ns::int, @id::int)
    WHEN @pair::boolean                      THEN pg_try_advisory_lock(@ns::int, @id::int)
    WHEN @shared::boolean                    THEN pg_try_advisory_lock_shared(@key::bigint)
    ELSE pg_try_advisory_lock(@key::bigint)
END)::boolean AS acquired;

-- name: AdvisoryUnlock :one
SELECT (CASE
    WHEN @pair::boolean AND @shared::boolean THEN pg_advisory_unlock_shared(@ns::int, @id::int)
    WHEN @pair::boolean                      THEN pg_advisory_unlock(@ns::int, @id::int)
    WHEN @shared::boolean                    THEN pg_advisory_unlock_shared(@key::bigint)
    ELSE pg_advisory_unlock(@key::bigint)
END)::boolean AS released;

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
