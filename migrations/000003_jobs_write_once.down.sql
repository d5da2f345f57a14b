-- Reverts 000003: a transactional claim writes its record again, and pglock_job_finish_tx
-- updates it; the helpers are 000001's again; the CHECK constraints come back. A claim pending
-- in a transaction under way is not carried over: apply this with no RunTx running.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

CREATE OR REPLACE FUNCTION pglock_job_claim(
    p_scope varchar, p_key text, p_holder_id varchar, p_instance varchar, p_transactional boolean,
    p_ttl_ms bigint, p_fingerprint text, p_window_ms bigint, p_max_attempts integer,
    p_idle_timeout_ms bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lock_key bigint;
    v_now      timestamptz;
    v_job      pglock_jobs;
    v_found    boolean;
    v_setting  bigint;
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_holder_id IS NULL OR p_holder_id = '' OR length(p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_holder_id: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
    IF p_transactional IS NULL THEN
        RAISE EXCEPTION 'p_transactional: must not be null' USING ERRCODE = '22023', COLUMN = 'p_transactional';
    END IF;
    IF NOT p_transactional AND pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 0 THEN
        RAISE EXCEPTION 'p_max_attempts: must be 0 (no limit) or more' USING ERRCODE = '22023', COLUMN = 'p_max_attempts';
    END IF;
    IF p_idle_timeout_ms IS NULL OR p_idle_timeout_ms < 0 OR p_idle_timeout_ms > 2147483647 THEN
        RAISE EXCEPTION 'p_idle_timeout_ms: must be from 0 (none) to 2147483647' USING ERRCODE = '22023', COLUMN = 'p_idle_timeout_ms';
    END IF;
    -- Twice at most: a record read before the advisory lock may change before the claim's
    -- write (an attempt finishing); read after it, it changes only that way.
    FOR i IN 1..2 LOOP
        v_now := clock_timestamp();
        SELECT * INTO v_job FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key;
        -- A record counts within its retention, and always while a lease on it is live.
        v_found := FOUND AND (v_job.retain_until > v_now OR (v_job.status = 'running' AND v_job.lease_expires_at > v_now));
        IF v_found THEN
            IF p_fingerprint IS NOT NULL AND v_job.fingerprint IS NOT NULL AND v_job.fingerprint <> p_fingerprint THEN
                RETURN pglock_job_answer_of('mismatch', v_job, v_lock_key);
            ELSIF v_job.status = 'succeeded' THEN
                RETURN pglock_job_answer_of('done', v_job, v_lock_key);
            ELSIF v_job.status = 'running' AND v_job.lease_expires_at > v_now THEN
                RETURN pglock_job_answer_of('running', v_job, pglock_job_lock_key(p_scope, p_key));
            ELSIF p_max_attempts > 0 AND v_job.attempts >= p_max_attempts THEN
                -- Failed, or running under a lease that expired: its runner vanished, and a
                -- crashed attempt counts.
                RETURN pglock_job_answer_of('gave_up', v_job, v_lock_key);
            END IF;
        END IF;
        -- The key's lock key is a SHA-256: only a claim that may write, or wait, pays for it.
        v_lock_key := coalesce(v_lock_key, pglock_job_lock_key(p_scope, p_key));
        IF NOT pg_try_advisory_xact_lock(v_lock_key) THEN
            IF NOT v_found THEN
                v_job := NULL;
            END IF;
            RETURN pglock_job_answer_of('running', v_job, v_lock_key);
        END IF;

        v_now := clock_timestamp();
        INSERT INTO pglock_jobs AS j (scope, job_key, status, holder_id, instance, attempts, fencing_token,
                                      lease_expires_at, started_at, finished_at, retain_until, created_at, fingerprint)
        VALUES (p_scope, p_key, CASE WHEN p_transactional THEN 'succeeded' ELSE 'running' END,
                p_holder_id, coalesce(p_instance, ''), 1, nextval('pglock_jobs_fencing_token_seq'),
                CASE WHEN p_transactional THEN NULL ELSE v_now + p_ttl_ms * interval '1 millisecond' END,
                v_now, NULL,
                v_now + p_window_ms * interval '1 millisecond', v_now, p_fingerprint)
        ON CONFLICT (scope, job_key) DO UPDATE
           SET status = excluded.status, holder_id = excluded.holder_id, instance = excluded.instance,
               fencing_token = excluded.fencing_token, lease_expires_at = excluded.lease_expires_at,
               started_at = excluded.started_at, finished_at = excluded.finished_at,
               -- A record past its retention is gone: this is a first delivery again.
               attempts = CASE WHEN j.retain_until > v_now THEN j.attempts + 1 ELSE 1 END,
               created_at = CASE WHEN j.retain_until > v_now THEN j.created_at ELSE v_now END,
               last_error = CASE WHEN j.retain_until > v_now THEN j.last_error END,
               result = NULL,
               fingerprint = CASE WHEN j.retain_until > v_now THEN coalesce(j.fingerprint, excluded.fingerprint)
                                  ELSE excluded.fingerprint END,
               retain_until = excluded.retain_until
         WHERE NOT (j.status = 'running' AND j.lease_expires_at > v_now)
           AND (j.retain_until <= v_now
                OR ((p_fingerprint IS NULL OR j.fingerprint IS NULL OR j.fingerprint = p_fingerprint)
                    AND j.status <> 'succeeded'
                    AND (p_max_attempts = 0 OR j.attempts < p_max_attempts)))
        RETURNING * INTO v_job;
        IF FOUND THEN
            IF p_transactional AND p_idle_timeout_ms > 0 THEN
                -- In milliseconds, 0 for none. current_setting shows it with a unit interval
                -- input reads ('30s', '1min'); pg_settings would cost listing every setting.
                v_setting := (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint;
                IF v_setting = 0 OR v_setting > p_idle_timeout_ms THEN
                    PERFORM set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true);
                END IF;
            END IF;
            RETURN pglock_job_answer_of('claimed', v_job, v_lock_key);
        END IF;
    END LOOP;
    -- Changed twice between read and write: only an attempt finishing changes a record this
    -- claim may not take, and it does so once.
    RETURN pglock_job_answer_of('running', v_job, v_lock_key);
END;
$$;

CREATE OR REPLACE FUNCTION pglock_job_finish_tx(p_scope varchar, p_key text, p_fencing_token bigint, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    UPDATE pglock_jobs j
       SET finished_at = v_now, retain_until = v_now + p_window_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'succeeded' AND j.finished_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM pglock_job_announce(p_scope, p_key);
    RETURN v_now;
END;
$$;

DROP FUNCTION pglock_job_require_claim(timestamptz, varchar, text);
DROP FUNCTION pglock_job_write_pending(varchar, text, bigint, timestamptz, bigint);
DROP TYPE pglock_job_pending;

CREATE OR REPLACE FUNCTION pglock_job_lock_key(p_scope varchar, p_key text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
               pg_catalog.convert_to('pglock.jobs/'::pg_catalog.text OPERATOR(pg_catalog.||) p_scope, 'UTF8'::pg_catalog.name)
               OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
               OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_key, 'UTF8'::pg_catalog.name)
           ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8;
END;
$$;

CREATE OR REPLACE FUNCTION pglock_job_answer_of(p_outcome text, p_job pglock_jobs, p_lock_key bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN ROW(p_outcome, p_job.status, p_job.holder_id, p_job.instance, p_job.attempts, p_job.fencing_token,
               p_job.lease_expires_at, p_job.started_at, p_job.finished_at, p_job.last_error, p_job.result,
               p_job.fingerprint, p_job.retain_until, p_job.created_at, p_lock_key)::pglock_job_answer;
END;
$$;

DROP FUNCTION pglock_job_announce(varchar, text);
CREATE FUNCTION pglock_job_announce(p_scope varchar, p_key text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF EXISTS (SELECT FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key) THEN
        PERFORM pg_notify('pglock_jobs', pglock_job_lock_key(p_scope, p_key)::text);
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_announce(varchar, text) FROM PUBLIC;

ALTER TABLE pglock_jobs
    ADD CONSTRAINT pglock_jobs_job_key_check CHECK (octet_length(job_key) BETWEEN 1 AND 1024),
    ADD CONSTRAINT pglock_jobs_status_check CHECK (status IN ('running', 'succeeded', 'failed'));

COMMIT;
