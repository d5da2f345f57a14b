-- Job deduplication: each job's or event's effect once, and every duplicate delivery answered
-- with the first run's outcome. One row per (scope, key) records the claim, the attempts (each
-- with a fencing token), the lease of a runner outside any transaction, the outcome and how long
-- it is kept. Times are clock_timestamp()'s: a long transaction never makes a lease look
-- younger than it is.
--
-- Two ways to claim a key, which never block each other (pglock_job_claim): outside any
-- transaction, committing a 'running' row under a lease that the runner renews and that a
-- later delivery takes over once it expires; or inside the caller's transaction, writing the
-- row in it so that the outcome commits, or rolls back, with the effects. Claims take a
-- transaction-level advisory lock on the key first (pglock_job_lock_key), without waiting: a
-- claim inside a transaction that has not committed yet is invisible to a read, but not to
-- the lock.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);
SELECT pglock_check_schema_is_safe();

CREATE TABLE pglock_jobs (
    scope            varchar(255) NOT NULL,
    job_key          text         NOT NULL CHECK (octet_length(job_key) BETWEEN 1 AND 1024),
    status           text         NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    holder_id        varchar(255) NOT NULL, -- the attempt's, as its runner named it
    instance         varchar(255) NOT NULL, -- the process that made the attempt
    attempts         integer      NOT NULL, -- claims so far, the current one included
    fencing_token    bigint       NOT NULL, -- the attempt's: larger than every earlier one's
    lease_expires_at timestamptz,           -- while running outside a transaction
    started_at       timestamptz  NOT NULL, -- the attempt's claim
    finished_at      timestamptz,
    last_error       text,                  -- of the last failed attempt
    result           jsonb,                 -- what the succeeded attempt saved
    fingerprint      text,                  -- of the payload, as the first delivery gave it
    retain_until     timestamptz  NOT NULL, -- the record counts until then, and is deleted after
    created_at       timestamptz  NOT NULL, -- the first claim
    PRIMARY KEY (scope, job_key)
);

-- pglock_job_collect deletes in this order, a batch at a time.
CREATE INDEX pglock_jobs_retain_until_idx ON pglock_jobs (retain_until);

-- One sequence for every attempt of every key: a token is never reused, not even after the
-- record is forgotten.
CREATE SEQUENCE pglock_jobs_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

-- Deliveries waiting for a key's outcome. An outcome committed while a key has waiters is
-- announced on the channel pglock_jobs, with the key's lock key as payload; without waiters
-- nothing is sent, for a notification serializes commits. Unlogged: a waiter lost in a crash
-- polls and registers again.
CREATE UNLOGGED TABLE pglock_job_waiters (
    scope      varchar(255) NOT NULL,
    job_key    text         NOT NULL,
    waiter_id  varchar(255) NOT NULL,
    expires_at timestamptz  NOT NULL,
    PRIMARY KEY (scope, job_key, waiter_id)
);

-- What a claim answers: the outcome ('claimed', 'done', 'running', 'gave_up', 'mismatch'), the
-- record as the claim left or found it (NULLs when there is none), and, for a delivery that may
-- wait (running) or has claimed, the key's lock key.
CREATE TYPE pglock_job_answer AS (
    outcome          text,
    status           text,
    holder_id        varchar(255),
    instance         varchar(255),
    attempts         integer,
    fencing_token    bigint,
    lease_expires_at timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text,
    result           jsonb,
    fingerprint      text,
    retain_until     timestamptz,
    created_at       timestamptz,
    lock_key         bigint
);

-- The advisory lock key of a job (one bigint): pglock_advisory_key of the key in the namespace
-- 'pglock.jobs/' || scope, whose formula this repeats. Advisory names in namespaces starting
-- 'pglock.jobs/' are reserved. The helpers a claim calls are PL/pgSQL: called from PL/pgSQL, a
-- SQL function that cannot be inlined has its body planned again in every transaction.
CREATE FUNCTION pglock_job_lock_key(p_scope varchar, p_key text)
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

-- SQLSTATE 22023, COLUMN naming the argument, unless scope and key can name a job.
CREATE FUNCTION pglock_job_check_key(p_scope varchar, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_scope IS NULL OR length(p_scope) > 255 THEN
        RAISE EXCEPTION 'p_scope: must be at most 255 characters' USING ERRCODE = '22023', COLUMN = 'p_scope';
    END IF;
    IF p_key IS NULL OR octet_length(p_key) NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'p_key: must be 1 to 1024 bytes' USING ERRCODE = '22023', COLUMN = 'p_key';
    END IF;
END;
$$;

-- Claims a delivery of (p_scope, p_key) for the holder p_holder_id of instance p_instance, in one
-- statement, and answers with the outcome and the record:
--   done      it succeeded before, and the record is within its retention: do nothing;
--   running   another attempt is under way (a live lease, or a claim in a transaction that has
--             not ended): do nothing, or wait for its outcome (see pglock_job_await);
--   gave_up   it was claimed p_max_attempts times (0: no limit) and the last attempt failed,
--             or its runner vanished;
--   mismatch  the record's fingerprint is not p_fingerprint (a NULL on either side matches);
--   claimed   this delivery runs it: a new record, or one that had failed, whose lease expired
--             (its runner vanished) or whose retention ended (never while a lease on it is
--             live). attempts counts the claims of the record, fencing_token is the attempt's.
-- Outside a transaction (p_transactional false) the record is 'running' under a lease of
-- p_ttl_ms, renewed by pglock_job_renew and ended by pglock_job_finish. Inside the caller's
-- transaction (p_transactional true), the row is written there as 'succeeded', so that whatever
-- commits the transaction commits the outcome with the effects, and a rollback leaves the key to
-- the next delivery: the caller calls pglock_job_finish_tx just before COMMIT, and after a
-- rollback records a failure with a claim outside a transaction and pglock_job_finish. The claim's advisory lock then lasts until the transaction ends, and
-- with p_idle_timeout_ms > 0 the transaction's idle_in_transaction_session_timeout is at most
-- that (never loosened), so that a caller that vanishes mid-transaction holds the key no
-- longer. p_window_ms is the retention of the record from now (and from its outcome, which
-- pglock_job_finish sets). A claim never waits for another: not for a row lock held by an
-- attempt, nor for the uncommitted insert of one.
CREATE FUNCTION pglock_job_claim(
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
    IF NOT p_transactional AND (p_ttl_ms IS NULL OR p_ttl_ms < 100 OR p_ttl_ms > 86400000) THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 100 to 86400000 milliseconds, got %', coalesce(p_ttl_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_ttl_ms';
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

CREATE FUNCTION pglock_job_answer_of(p_outcome text, p_job pglock_jobs, p_lock_key bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN ROW(p_outcome, p_job.status, p_job.holder_id, p_job.instance, p_job.attempts, p_job.fencing_token,
               p_job.lease_expires_at, p_job.started_at, p_job.finished_at, p_job.last_error, p_job.result,
               p_job.fingerprint, p_job.retain_until, p_job.created_at, p_lock_key)::pglock_job_answer;
END;
$$;

-- Renews the lease of the attempt with p_fencing_token for p_ttl_ms from now; returns the new
-- expiry, or NULL (changing nothing) when the attempt no longer holds an unexpired lease.
CREATE FUNCTION pglock_job_renew(p_scope varchar, p_key text, p_fencing_token bigint, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    IF p_ttl_ms IS NULL OR p_ttl_ms < 100 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 100 to 86400000 milliseconds, got %', coalesce(p_ttl_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_ttl_ms';
    END IF;
    UPDATE pglock_jobs j
       SET lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()
    RETURNING j.lease_expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

-- Records the outcome of the attempt with p_fencing_token, claimed outside a transaction:
-- succeeded with p_result, or failed with p_error; the record is then kept p_window_ms from now.
-- Returns when it finished (again, for the same outcome: a retry after a lost answer is no
-- error), or NULL, changing nothing, when the record is no longer that attempt's (taken over,
-- or forgotten): a runner whose lease was lost cannot mark done what another now runs. An
-- attempt whose lease expired untaken may still finish: nobody else ran it. Waiters are told
-- when the outcome commits.
CREATE FUNCTION pglock_job_finish(p_scope varchar, p_key text, p_fencing_token bigint, p_succeeded boolean,
                                  p_result jsonb, p_error text, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION 'p_succeeded: must not be null' USING ERRCODE = '22023', COLUMN = 'p_succeeded';
    END IF;
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    UPDATE pglock_jobs j
       SET status = CASE WHEN p_succeeded THEN 'succeeded' ELSE 'failed' END,
           finished_at = v_now, lease_expires_at = NULL,
           result = CASE WHEN p_succeeded THEN p_result END,
           last_error = CASE WHEN p_succeeded THEN j.last_error ELSE coalesce(p_error, '') END,
           retain_until = v_now + p_window_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running';
    IF NOT FOUND THEN
        SELECT j.finished_at INTO v_now FROM pglock_jobs j
         WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
           AND j.status = CASE WHEN p_succeeded THEN 'succeeded' ELSE 'failed' END;
        RETURN v_now;
    END IF;
    PERFORM pglock_job_announce(p_scope, p_key);
    RETURN v_now;
END;
$$;

-- Records when the attempt claimed inside the calling transaction with p_fencing_token
-- finished, and keeps its record p_window_ms from then (not from the claim: fn may have run
-- longer than the window), and announces the outcome; call it just before COMMIT, which makes
-- the outcome true. Returns the finish time, or NULL when this transaction holds no such claim.
CREATE FUNCTION pglock_job_finish_tx(p_scope varchar, p_key text, p_fencing_token bigint, p_window_ms bigint)
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

-- Announces the outcome of (p_scope, p_key) on the channel pglock_jobs, when the transaction
-- commits, if the key has waiters; otherwise does nothing, for a notification serializes
-- commits.
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

-- Registers p_waiter_id as waiting for the outcome of (p_scope, p_key) until p_ttl_ms from now
-- (again to extend it): pglock_job_finish announces outcomes of keys with waiters on the
-- channel pglock_jobs. LISTEN first, register, then claim again: an outcome committed between
-- the claim's answer and the registration would go unannounced.
CREATE FUNCTION pglock_job_await(p_scope varchar, p_key text, p_waiter_id varchar, p_ttl_ms bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_waiter_id IS NULL OR p_waiter_id = '' OR length(p_waiter_id) > 255 THEN
        RAISE EXCEPTION 'p_waiter_id: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_waiter_id';
    END IF;
    IF p_ttl_ms IS NULL OR p_ttl_ms < 100 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 100 to 86400000 milliseconds, got %', coalesce(p_ttl_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_ttl_ms';
    END IF;
    INSERT INTO pglock_job_waiters (scope, job_key, waiter_id, expires_at)
    VALUES (p_scope, p_key, p_waiter_id, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (scope, job_key, waiter_id) DO UPDATE SET expires_at = excluded.expires_at;
    RETURN pglock_job_lock_key(p_scope, p_key);
END;
$$;

CREATE FUNCTION pglock_job_unawait(p_scope varchar, p_key text, p_waiter_id varchar)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    DELETE FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key AND w.waiter_id = p_waiter_id;
$$;

-- Deletes the record of (p_scope, p_key) so that the key may run again, after waiting for a
-- claim inside a transaction to end; an attempt running outside one loses its lease (its next
-- renewal finds the record gone). Returns the deleted record's status, NULL when there was none.
CREATE FUNCTION pglock_job_forget(p_scope varchar, p_key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_status text;
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    PERFORM pg_advisory_xact_lock(pglock_job_lock_key(p_scope, p_key));
    DELETE FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key RETURNING j.status INTO v_status;
    IF v_status IS NOT NULL THEN
        PERFORM pglock_job_announce(p_scope, p_key);
    END IF;
    RETURN v_status;
END;
$$;

-- Deletes up to p_batch records past their retention (never one running under a live lease,
-- nor one a claim holds: those are skipped, not waited for), and registrations of waiters past
-- theirs. Returns how many records it deleted: call it until that is less than p_batch. Each
-- call is one short transaction.
CREATE FUNCTION pglock_job_collect(p_batch integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_deleted integer;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'p_batch: must be from 1 to 100000' USING ERRCODE = '22023', COLUMN = 'p_batch';
    END IF;
    DELETE FROM pglock_jobs j
     WHERE (j.scope, j.job_key) IN (
            SELECT c.scope, c.job_key FROM pglock_jobs c
             WHERE c.retain_until <= clock_timestamp()
               AND NOT (c.status = 'running' AND c.lease_expires_at > clock_timestamp())
             ORDER BY c.retain_until
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    DELETE FROM pglock_job_waiters w WHERE w.expires_at <= clock_timestamp();
    RETURN v_deleted;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_check_key(varchar, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_answer_of(text, pglock_jobs, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_claim(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_renew(varchar, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_finish_tx(varchar, text, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_announce(varchar, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_await(varchar, text, varchar, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_unawait(varchar, text, varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_forget(varchar, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_job_collect(integer) FROM PUBLIC;

COMMIT;
