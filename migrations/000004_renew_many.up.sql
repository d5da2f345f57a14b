-- A process renews its leases together: one statement per heartbeat tick for every lease due,
-- instead of one per lease. Until now each held lock, running job attempt and cron run renewed
-- itself with a statement of its own, so the database's statement rate capped how many leases a
-- process could hold, and past that cap the process lost most of them. Each function below
-- takes arrays (one element per lease, all of the same length) and answers one row per element,
-- in their order, with an outcome: 'renewed' (expires_at is the new expiry), 'gone' (no longer
-- the holder's, or expired: what its single-lease function, extend_lock_ms, pglock_job_renew or
-- pglock_cron_renew, answers with NULL), or 'busy': another transaction has the row locked (a
-- fence, a release under way), and it was passed over rather than waited for, so that one
-- lease's fence never holds up the renewal of the others; renew it again shortly. Each lease
-- keeps its own TTL. A bad element fails the whole call (22023, COLUMN naming the array) and
-- renews nothing.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- Raises 22023 for arrays that are not all of the first one's length; the COLUMN field names the
-- first array that is not (the first one when it is NULL).
CREATE FUNCTION pglock_check_arrays(p_names text[], p_lengths integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_lengths[1] IS NULL THEN
        RAISE EXCEPTION '%: must not be NULL', p_names[1] USING ERRCODE = '22023', COLUMN = p_names[1];
    END IF;
    FOR i IN 2 .. cardinality(p_lengths) LOOP
        IF p_lengths[i] IS DISTINCT FROM p_lengths[1] THEN
            RAISE EXCEPTION '%: % elements, where % has %', p_names[i], coalesce(p_lengths[i]::text, 'NULL'),
                p_names[1], p_lengths[1] USING ERRCODE = '22023', COLUMN = p_names[i];
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_arrays(text[], integer[]) FROM PUBLIC;

-- Raises 22023 for lease arrays a batch function cannot take: not of one length, or an element
-- with a bad lock name, holder or TTL (COLUMN names the argument, as for a single lease).
CREATE FUNCTION pglock_check_leases(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad record;
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_lock_names', 'p_holder_ids', 'p_ttl_ms'],
        ARRAY[cardinality(p_lock_names), cardinality(p_holder_ids), cardinality(p_ttl_ms)]);
    SELECT r.n, r.h, r.t INTO v_bad
      FROM unnest(p_lock_names, p_holder_ids, p_ttl_ms) AS r(n, h, t)
     WHERE r.n IS NULL OR r.h IS NULL OR length(r.n) NOT BETWEEN 1 AND 255
        OR length(r.h) NOT BETWEEN 1 AND 255 OR pglock_ttl_ok(r.t) IS NOT TRUE
     LIMIT 1;
    IF FOUND THEN
        IF pglock_ttl_ok(v_bad.t) IS NOT TRUE THEN
            PERFORM pglock_raise_bad_ttl(v_bad.t, 'p_ttl_ms');
        END IF;
        PERFORM pglock_check_name_and_holder(v_bad.n, v_bad.h);
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_leases(varchar[], varchar[], bigint[]) FROM PUBLIC;

-- Renews the locks p_holder_ids[i] holds on p_lock_names[i] for p_ttl_ms[i] from now, as
-- extend_lock_ms does one.
CREATE FUNCTION pglock_renew_many(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
RETURNS TABLE (lock_name varchar, holder_id varchar, outcome text, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pglock_check_leases(p_lock_names, p_holder_ids, p_ttl_ms);

    RETURN QUERY
        WITH wanted AS (
            SELECT r.n, r.h, r.t, r.i FROM unnest(p_lock_names, p_holder_ids, p_ttl_ms) WITH ORDINALITY AS r(n, h, t, i)
        ), mine AS (
            SELECT l.lock_name, w.t FROM distributed_locks l JOIN wanted w ON l.lock_name = w.n AND l.holder_id = w.h
             WHERE l.expires_at > clock_timestamp()
               FOR UPDATE OF l SKIP LOCKED
        ), renewed AS (
            UPDATE distributed_locks l
               SET expires_at = clock_timestamp() + m.t * interval '1 millisecond'
              FROM mine m
             WHERE l.lock_name = m.lock_name
            RETURNING l.lock_name, l.holder_id, l.expires_at
        )
        SELECT w.n, w.h,
               CASE WHEN x.expires_at IS NOT NULL THEN 'renewed'
                    WHEN EXISTS (SELECT FROM distributed_locks l WHERE l.lock_name = w.n AND l.holder_id = w.h
                                    AND l.expires_at > clock_timestamp()) THEN 'busy'
                    ELSE 'gone' END,
               x.expires_at
          FROM wanted w
          LEFT JOIN renewed x ON x.lock_name = w.n AND x.holder_id = w.h
         ORDER BY w.i;
END;
$$;

REVOKE ALL ON FUNCTION pglock_renew_many(varchar[], varchar[], bigint[]) FROM PUBLIC;

-- Renews the leases of the job attempts (p_scopes[i], p_keys[i], p_fencing_tokens[i]) for
-- p_ttl_ms[i] from now, as pglock_job_renew does one.
CREATE FUNCTION pglock_job_renew_many(p_scopes varchar[], p_keys text[], p_fencing_tokens bigint[], p_ttl_ms bigint[])
RETURNS TABLE (scope varchar, job_key text, fencing_token bigint, outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_bad bigint;
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_scopes', 'p_keys', 'p_fencing_tokens', 'p_ttl_ms'],
        ARRAY[cardinality(p_scopes), cardinality(p_keys), cardinality(p_fencing_tokens), cardinality(p_ttl_ms)]);
    SELECT r.t INTO v_bad FROM unnest(p_ttl_ms) AS r(t) WHERE pglock_ttl_ok(r.t) IS NOT TRUE LIMIT 1;
    IF FOUND THEN
        PERFORM pglock_raise_bad_ttl(v_bad, 'p_ttl_ms');
    END IF;

    RETURN QUERY
        WITH wanted AS (
            SELECT r.s, r.k, r.f, r.t, r.i
              FROM unnest(p_scopes, p_keys, p_fencing_tokens, p_ttl_ms) WITH ORDINALITY AS r(s, k, f, t, i)
        ), mine AS (
            SELECT j.scope, j.job_key, w.t FROM pglock_jobs j JOIN wanted w ON j.scope = w.s AND j.job_key = w.k
             WHERE j.fencing_token = w.f AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()
               FOR UPDATE OF j SKIP LOCKED
        ), renewed AS (
            UPDATE pglock_jobs j
               SET lease_expires_at = clock_timestamp() + m.t * interval '1 millisecond'
              FROM mine m
             WHERE j.scope = m.scope AND j.job_key = m.job_key
            RETURNING j.scope, j.job_key, j.fencing_token, j.lease_expires_at
        )
        SELECT w.s, w.k, w.f,
               CASE WHEN x.lease_expires_at IS NOT NULL THEN 'renewed'
                    WHEN EXISTS (SELECT FROM pglock_jobs j WHERE j.scope = w.s AND j.job_key = w.k AND j.fencing_token = w.f
                                    AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()) THEN 'busy'
                    ELSE 'gone' END,
               x.lease_expires_at
          FROM wanted w
          LEFT JOIN renewed x ON x.scope = w.s AND x.job_key = w.k AND x.fencing_token = w.f
         ORDER BY w.i;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_renew_many(varchar[], text[], bigint[], bigint[]) FROM PUBLIC;

-- Renews the leases of the cron runs (p_ids[i], p_fencing_tokens[i]) for p_ttl_ms[i] from now,
-- as pglock_cron_renew does one.
CREATE FUNCTION pglock_cron_renew_many(p_ids bigint[], p_fencing_tokens bigint[], p_ttl_ms bigint[])
RETURNS TABLE (id bigint, fencing_token bigint, outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_bad bigint;
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_ids', 'p_fencing_tokens', 'p_ttl_ms'],
        ARRAY[cardinality(p_ids), cardinality(p_fencing_tokens), cardinality(p_ttl_ms)]);
    SELECT r.t INTO v_bad FROM unnest(p_ttl_ms) AS r(t) WHERE pglock_ttl_ok(r.t) IS NOT TRUE LIMIT 1;
    IF FOUND THEN
        PERFORM pglock_raise_bad_ttl(v_bad, 'p_ttl_ms');
    END IF;

    RETURN QUERY
        WITH wanted AS (
            SELECT r.r, r.f, r.t, r.o FROM unnest(p_ids, p_fencing_tokens, p_ttl_ms) WITH ORDINALITY AS r(r, f, t, o)
        ), mine AS (
            SELECT c.id, w.t FROM pglock_cron_runs c JOIN wanted w ON c.id = w.r
             WHERE c.fencing_token = w.f AND c.status = 'running' AND c.lease_expires_at > clock_timestamp()
               FOR UPDATE OF c SKIP LOCKED
        ), renewed AS (
            UPDATE pglock_cron_runs c
               SET lease_expires_at = clock_timestamp() + m.t * interval '1 millisecond'
              FROM mine m
             WHERE c.id = m.id
            RETURNING c.id, c.fencing_token, c.lease_expires_at
        )
        SELECT w.r, w.f,
               CASE WHEN x.lease_expires_at IS NOT NULL THEN 'renewed'
                    WHEN EXISTS (SELECT FROM pglock_cron_runs c WHERE c.id = w.r AND c.fencing_token = w.f
                                    AND c.status = 'running' AND c.lease_expires_at > clock_timestamp()) THEN 'busy'
                    ELSE 'gone' END,
               x.lease_expires_at
          FROM wanted w
          LEFT JOIN renewed x ON x.id = w.r AND x.fencing_token = w.f
         ORDER BY w.o;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_renew_many(bigint[], bigint[], bigint[]) FROM PUBLIC;

-- Keeps the places of many waiters in one statement: refreshes the place p_holder_ids[i] has in
-- the queue of p_lock_names[i] for p_ttl_ms[i] from now, and says what the lock is doing, so that
-- a waiter told of releases and handoffs (NOTIFY) needs no poll of its own until the lock's
-- lease could end. A row per element, in their order: outcome 'kept' (expires_at: the place's new
-- expiry) or 'gone' (no such place: the lock was handed to that waiter, or the place expired or
-- was left; poll with pglock_attempt), the lock's holder and expiry (NULLs when there is no
-- lock row: it is free, poll), and the database time the answer holds for.
CREATE FUNCTION pglock_wait_many(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
RETURNS TABLE (lock_name varchar, holder_id varchar, outcome text, expires_at timestamptz,
               lock_holder_id varchar, lock_expires_at timestamptz, checked_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pglock_check_leases(p_lock_names, p_holder_ids, p_ttl_ms);

    RETURN QUERY
        WITH wanted AS (
            SELECT r.n, r.h, r.t, r.i FROM unnest(p_lock_names, p_holder_ids, p_ttl_ms) WITH ORDINALITY AS r(n, h, t, i)
        ), kept AS (
            UPDATE distributed_lock_waiters p
               SET expires_at = clock_timestamp() + w.t * interval '1 millisecond'
              FROM wanted w
             WHERE p.lock_name = w.n AND p.holder_id = w.h AND p.expires_at > clock_timestamp()
            RETURNING p.lock_name, p.holder_id, p.expires_at
        )
        SELECT w.n, w.h, CASE WHEN k.expires_at IS NULL THEN 'gone' ELSE 'kept' END, k.expires_at,
               l.holder_id, l.expires_at, clock_timestamp()
          FROM wanted w
          LEFT JOIN kept k ON k.lock_name = w.n AND k.holder_id = w.h
          LEFT JOIN distributed_locks l ON l.lock_name = w.n
         ORDER BY w.i;
END;
$$;

REVOKE ALL ON FUNCTION pglock_wait_many(varchar[], varchar[], bigint[]) FROM PUBLIC;

-- Whether a job key still runs, for deliveries waiting for its outcome: outside a transaction
-- under a live lease (lease_left_ms: how much of it is left, NULL otherwise), or inside one
-- (its claim holds the key's advisory lock, as pg_locks shows: the lock is never taken here, so
-- that no claim finds it taken by a watcher). A plain read: a process with many deliveries
-- waiting for one key checks it once for all of them.
CREATE FUNCTION pglock_job_running(p_scope varchar, p_key text)
RETURNS TABLE (running boolean, lease_left_ms bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT coalesce(j.status = 'running' AND j.lease_expires_at > clock_timestamp(), false)
           OR EXISTS (SELECT FROM pg_catalog.pg_locks l
                       WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                         AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
                         AND l.classid = ((k.lock_key >> 32) & 4294967295)::oid
                         AND l.objid = (k.lock_key & 4294967295)::oid),
           CASE WHEN j.status = 'running' AND j.lease_expires_at > clock_timestamp()
                THEN (extract(epoch FROM j.lease_expires_at - clock_timestamp()) * 1000)::bigint END
      FROM (SELECT pglock_job_lock_key(p_scope, p_key) AS lock_key) AS k
      LEFT JOIN pglock_jobs j ON j.scope = p_scope AND j.job_key = p_key
$$;

REVOKE ALL ON FUNCTION pglock_job_running(varchar, text) FROM PUBLIC;

COMMIT;
