-- Debounced job keys (pglock_job_debounces): deliveries that coalesce, runs that claim them.

-- SQLSTATE 22023, COLUMN naming the argument, unless a debounced delivery's arguments are valid:
-- a key, a JSON payload of at most 65,536 bytes as text, a quiet period from 1 ms, and a maximum
-- wait from the quiet period to 3650 days.
CREATE OR REPLACE FUNCTION pglock_job_check_debounce(p_scope varchar, p_key text, p_payload jsonb, p_quiet_ms bigint,
                                                     p_max_wait_ms bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_payload IS NULL OR octet_length(p_payload::text) > 65536 THEN
        RAISE EXCEPTION 'p_payload: must be JSON of at most 65536 bytes' USING ERRCODE = '22023', COLUMN = 'p_payload';
    END IF;
    IF p_quiet_ms IS NULL OR p_quiet_ms < 1 THEN
        RAISE EXCEPTION 'p_quiet_ms: must be 1 ms or more, got %', coalesce(p_quiet_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_quiet_ms';
    END IF;
    IF p_max_wait_ms IS NULL OR p_max_wait_ms < p_quiet_ms OR pglock_job_window_ok(p_max_wait_ms) IS NOT TRUE THEN
        RAISE EXCEPTION 'p_max_wait_ms: must be from p_quiet_ms (%) to 3650 days, got %', p_quiet_ms, coalesce(p_max_wait_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_max_wait_ms';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_check_debounce(varchar, text, jsonb, bigint, bigint) FROM PUBLIC;

-- Delivers (p_scope, p_key) debounced: records p_payload as the key's pending payload (replacing
-- an earlier pending delivery's), due p_quiet_ms after this delivery but no later than
-- p_max_wait_ms after the pending cycle's first, on the database's clock. A delivery while the
-- key runs starts the next pending cycle: it is never merged into the run under way. Returns
-- the pending cycle's due time and its deliveries so far, and whether a run is under way. A
-- delivery that starts a pending cycle while no run is under way announces the scope on the
-- channel pglock_job_debounce, so that runners sleeping past its due time wake; the others move
-- the due time later, never earlier.
CREATE OR REPLACE FUNCTION pglock_job_debounce(p_scope varchar, p_key text, p_payload jsonb, p_quiet_ms bigint,
                                               p_max_wait_ms bigint)
RETURNS TABLE (due_at timestamptz, deliveries integer, running boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_due     timestamptz;
    v_count   integer;
    v_running boolean;
BEGIN
    PERFORM pglock_job_check_debounce(p_scope, p_key, p_payload, p_quiet_ms, p_max_wait_ms);
    INSERT INTO pglock_job_debounces AS d (scope, job_key, payload, deliveries, first_at, last_at, due_at, ready_at)
    VALUES (p_scope, p_key, p_payload, 1, v_now, v_now,
            v_now + least(p_quiet_ms, p_max_wait_ms) * interval '1 millisecond',
            v_now + least(p_quiet_ms, p_max_wait_ms) * interval '1 millisecond')
    ON CONFLICT (scope, job_key) DO UPDATE
       SET payload = excluded.payload,
           deliveries = d.deliveries + 1,
           first_at = coalesce(d.first_at, v_now),
           last_at = v_now,
           due_at = least(v_now + p_quiet_ms * interval '1 millisecond',
                          coalesce(d.first_at, v_now) + p_max_wait_ms * interval '1 millisecond'),
           ready_at = CASE WHEN d.run_token IS NULL
                           THEN least(v_now + p_quiet_ms * interval '1 millisecond',
                                      coalesce(d.first_at, v_now) + p_max_wait_ms * interval '1 millisecond')
                           ELSE d.ready_at END
    RETURNING d.due_at, d.deliveries, d.run_token IS NOT NULL INTO v_due, v_count, v_running;
    IF v_count = 1 AND NOT v_running THEN
        PERFORM pg_notify('pglock_job_debounce', p_scope);
    END IF;
    RETURN QUERY SELECT v_due, v_count, v_running;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce(varchar, text, jsonb, bigint, bigint) FROM PUBLIC;

-- Claims up to p_limit keys of p_scope that are ready, the earliest first, skipping those another
-- claim or finish holds, for instance p_instance under leases of p_ttl_ms: a key whose pending
-- cycle is due becomes its run (payload, deliveries and first delivery, attempt 1), and the next
-- delivery starts a new cycle; a run whose lease expired (its runner vanished, or it failed and
-- its retry is due) is run again as it was, with a new token (attempt + 1). Each claim draws a
-- fencing token from pglock_jobs_fencing_token_seq: the run's finish, fail and renewals must
-- name it.
CREATE OR REPLACE FUNCTION pglock_job_debounce_claim(p_scope varchar, p_instance varchar, p_ttl_ms bigint, p_limit integer)
RETURNS TABLE (job_key text, payload jsonb, deliveries integer, first_at timestamptz, fencing_token bigint,
               attempts integer, started_at timestamptz, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_scope IS NULL OR length(p_scope) > 255 THEN
        RAISE EXCEPTION 'p_scope: must be at most 255 characters' USING ERRCODE = '22023', COLUMN = 'p_scope';
    END IF;
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_limit: must be from 1 to 1000' USING ERRCODE = '22023', COLUMN = 'p_limit';
    END IF;
    RETURN QUERY
        WITH ready AS (
            SELECT r.scope, r.job_key FROM pglock_job_debounces r
             WHERE r.scope = p_scope AND r.ready_at <= v_now
             ORDER BY r.ready_at
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED
        )
        UPDATE pglock_job_debounces d
           SET run_payload    = CASE WHEN d.run_token IS NULL THEN d.payload ELSE d.run_payload END,
               run_deliveries = CASE WHEN d.run_token IS NULL THEN d.deliveries ELSE d.run_deliveries END,
               run_first_at   = CASE WHEN d.run_token IS NULL THEN d.first_at ELSE d.run_first_at END,
               run_attempts   = CASE WHEN d.run_token IS NULL THEN 1 ELSE d.run_attempts + 1 END,
               last_error     = CASE WHEN d.run_token IS NULL THEN NULL ELSE d.last_error END,
               payload        = CASE WHEN d.run_token IS NULL THEN NULL ELSE d.payload END,
               deliveries     = CASE WHEN d.run_token IS NULL THEN 0 ELSE d.deliveries END,
               first_at       = CASE WHEN d.run_token IS NULL THEN NULL ELSE d.first_at END,
               last_at        = CASE WHEN d.run_token IS NULL THEN NULL ELSE d.last_at END,
               due_at         = CASE WHEN d.run_token IS NULL THEN NULL ELSE d.due_at END,
               run_token      = pglock_next_token('pglock_jobs_fencing_token_seq'),
               run_instance   = coalesce(p_instance, ''),
               run_started_at = v_now,
               lease_expires_at = v_now + p_ttl_ms * interval '1 millisecond',
               ready_at       = v_now + p_ttl_ms * interval '1 millisecond'
          FROM ready
         WHERE d.scope = ready.scope AND d.job_key = ready.job_key
        RETURNING d.job_key, d.run_payload, d.run_deliveries, d.run_first_at, d.run_token, d.run_attempts,
                  d.run_started_at, d.lease_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce_claim(varchar, varchar, bigint, integer) FROM PUBLIC;

-- How long until the earliest key of p_scope is ready, in milliseconds (0 when one is), and the
-- database's clock; NULL when p_scope has no debounced key: how long its runners may sleep,
-- unless a delivery announces a new pending cycle.
CREATE OR REPLACE FUNCTION pglock_job_debounce_next(p_scope varchar)
RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT greatest(0, ceil(extract(epoch FROM min(d.ready_at) - clock_timestamp()) * 1000))::bigint
      FROM pglock_job_debounces d
     WHERE d.scope = p_scope
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce_next(varchar) FROM PUBLIC;

-- Renews the leases of the debounced runs (p_scopes[i], p_keys[i], p_fencing_tokens[i]) for
-- p_ttl_ms[i] from now, as pglock_job_renew_many does job attempts': 'renewed', 'busy' (its row
-- is locked: its finish is under way) or 'gone' per run, in order.
CREATE OR REPLACE FUNCTION pglock_job_debounce_renew_many(p_scopes varchar[], p_keys text[], p_fencing_tokens bigint[],
                                                          p_ttl_ms bigint[])
RETURNS TABLE (outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_scopes', 'p_keys', 'p_fencing_tokens', 'p_ttl_ms'],
        ARRAY[cardinality(p_scopes), cardinality(p_keys), cardinality(p_fencing_tokens), cardinality(p_ttl_ms)]);
    PERFORM pglock_check_ttls(p_ttl_ms);
    RETURN QUERY
        WITH wanted AS (
            SELECT r.s, r.k, r.f, r.t, r.i
              FROM unnest(p_scopes, p_keys, p_fencing_tokens, p_ttl_ms) WITH ORDINALITY AS r(s, k, f, t, i)
        ), mine AS (
            SELECT d.scope, d.job_key, w.t FROM pglock_job_debounces d JOIN wanted w ON d.scope = w.s AND d.job_key = w.k
             WHERE d.run_token = w.f AND d.lease_expires_at > clock_timestamp()
               FOR UPDATE OF d SKIP LOCKED
        ), renewed AS (
            UPDATE pglock_job_debounces d
               SET lease_expires_at = clock_timestamp() + m.t * interval '1 millisecond',
                   ready_at = clock_timestamp() + m.t * interval '1 millisecond'
              FROM mine m
             WHERE d.scope = m.scope AND d.job_key = m.job_key
            RETURNING d.scope, d.job_key, d.run_token, d.lease_expires_at
        )
        SELECT CASE WHEN x.lease_expires_at IS NOT NULL THEN 'renewed'
                    WHEN EXISTS (SELECT FROM pglock_job_debounces d WHERE d.scope = w.s AND d.job_key = w.k
                                    AND d.run_token = w.f AND d.lease_expires_at > clock_timestamp()) THEN 'busy'
                    ELSE 'gone' END,
               x.lease_expires_at
          FROM wanted w
          LEFT JOIN renewed x ON x.scope = w.s AND x.job_key = w.k AND x.run_token = w.f
         ORDER BY w.i;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce_renew_many(varchar[], text[], bigint[], bigint[]) FROM PUBLIC;

-- Ends the run of (p_scope, p_key) with p_fencing_token, in the transaction of its effects, just
-- before COMMIT: the key is deleted if nothing is pending, and is otherwise ready when its
-- pending cycle is due. Returns the time, or NULL, changing nothing, when the run is no longer
-- that token's (another runner took it over once its lease expired): the caller then rolls its
-- transaction back, so that the run's effects commit once.
CREATE OR REPLACE FUNCTION pglock_job_debounce_finish(p_scope varchar, p_key text, p_fencing_token bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
BEGIN
    DELETE FROM pglock_job_debounces d
     WHERE d.scope = p_scope AND d.job_key = p_key AND d.run_token = p_fencing_token AND d.deliveries = 0;
    IF NOT FOUND THEN
        UPDATE pglock_job_debounces d
           SET run_payload = NULL, run_deliveries = NULL, run_first_at = NULL, run_token = NULL, run_attempts = NULL,
               run_instance = NULL, run_started_at = NULL, lease_expires_at = NULL, last_error = NULL,
               ready_at = d.due_at
         WHERE d.scope = p_scope AND d.job_key = p_key AND d.run_token = p_fencing_token;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    RETURN clock_timestamp();
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce_finish(varchar, text, bigint) FROM PUBLIC;

-- Records that the run of (p_scope, p_key) with p_fencing_token failed with p_error: it is run
-- again, as it was, p_retry_ms from now. Returns the time of that retry, or NULL when the run is
-- no longer that token's.
CREATE OR REPLACE FUNCTION pglock_job_debounce_fail(p_scope varchar, p_key text, p_fencing_token bigint, p_error text,
                                                    p_retry_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_retry_at timestamptz;
BEGIN
    IF p_retry_ms IS NULL OR p_retry_ms < 0 OR pglock_job_window_ok(p_retry_ms + 1) IS NOT TRUE THEN
        RAISE EXCEPTION 'p_retry_ms: must be from 0 to 3650 days' USING ERRCODE = '22023', COLUMN = 'p_retry_ms';
    END IF;
    UPDATE pglock_job_debounces d
       SET last_error = p_error,
           lease_expires_at = clock_timestamp() + p_retry_ms * interval '1 millisecond',
           ready_at = clock_timestamp() + p_retry_ms * interval '1 millisecond'
     WHERE d.scope = p_scope AND d.job_key = p_key AND d.run_token = p_fencing_token
    RETURNING d.ready_at INTO v_retry_at;
    RETURN v_retry_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_debounce_fail(varchar, text, bigint, text, bigint) FROM PUBLIC;
