-- A RunTx delivery writes its job's record once. Until now a claim inside the caller's
-- transaction inserted the record and pglock_job_finish_tx updated it again just before COMMIT
-- (its finish time and retention, one of them indexed: never a HOT update), so every delivery
-- wrote the row and both its indexes twice. Now a transactional claim of a key without a record
-- writes nothing: it takes the key's advisory lock, as every claim does, and leaves the record
-- it would write in the transaction-local setting pglock.job_claim, and pglock_job_finish_tx
-- inserts it finished. Nothing else can write a record for the key meanwhile (a claim takes
-- the lock first), so the insert needs no ON CONFLICT. The calls are the same: claim, the
-- effects, pglock_job_finish_tx, COMMIT; but a transaction that commits without calling
-- pglock_job_finish_tx (a misuse) now records nothing, so the next delivery runs the key again.
-- A second claim in the same transaction first writes a pending one as the claim used to.
-- Only under READ COMMITTED: a snapshot older than the claim's lock may miss a record
-- committed just before it, so other isolation levels write at the claim, as before, and fail
-- with a serialization error then. Anyone can set pglock.job_claim, so a pending claim is
-- checked before it is written, as a claim checks its arguments, and written only while this
-- transaction holds the key's lock (taken again: it is this transaction's, or nobody's): a
-- forged one gets no more than a claim would. pglock_job_require_claim turns a finish that
-- found no claim into an error, for callers that send COMMIT with it.
--
-- The claim also takes the advisory lock before reading, so that what it reads stays true
-- until it writes; and the CHECK constraints of pglock_jobs go: the functions that alone write
-- it check what they write, and PostgreSQL reads a CHECK's expression anew in every statement
-- that inserts or updates (a tenth of a claim's time).
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

ALTER TABLE pglock_jobs DROP CONSTRAINT pglock_jobs_job_key_check, DROP CONSTRAINT pglock_jobs_status_check;

-- The claim's helpers become cheaper to call. In PL/pgSQL only an expression (an assignment,
-- a condition, a RETURN) runs without the executor; PERFORM and every statement start and stop
-- it, which costs more than most of what they run. So the key's lock key and the answer are
-- SQL functions that the planner inlines into the expression that calls them (the lock key is
-- STABLE, as convert_to is: IMMUTABLE with a STABLE body is not inlined), and the announcement
-- returns whether it sent one, so that callers can call it in an expression.
CREATE OR REPLACE FUNCTION pglock_job_lock_key(p_scope varchar, p_key text)
RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
               pg_catalog.convert_to('pglock.jobs/'::pg_catalog.text OPERATOR(pg_catalog.||) p_scope, 'UTF8'::pg_catalog.name)
               OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
               OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_key, 'UTF8'::pg_catalog.name)
           ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8
$$;

CREATE OR REPLACE FUNCTION pglock_job_answer_of(p_outcome text, p_job pglock_jobs, p_lock_key bigint)
RETURNS pglock_job_answer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ROW(p_outcome, p_job.status, p_job.holder_id, p_job.instance, p_job.attempts, p_job.fencing_token,
               p_job.lease_expires_at, p_job.started_at, p_job.finished_at, p_job.last_error, p_job.result,
               p_job.fingerprint, p_job.retain_until, p_job.created_at, p_lock_key)::pglock_job_answer
$$;

-- Called only by the SECURITY DEFINER functions of jobs, with their search_path.
DROP FUNCTION pglock_job_announce(varchar, text);
CREATE FUNCTION pglock_job_announce(p_scope varchar, p_key text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF EXISTS (SELECT FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key) THEN
        PERFORM pg_notify('pglock_jobs', pglock_job_lock_key(p_scope, p_key)::text);
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_announce(varchar, text) FROM PUBLIC;

-- A claim inside a transaction that has not written its record yet. Its text form, in
-- pglock.job_claim, reads back the same whatever the session's DateStyle or TimeZone: the
-- start is in microseconds since the epoch.
CREATE TYPE pglock_job_pending AS (
    scope         varchar(255),
    job_key       text,
    holder_id     varchar(255),
    instance      varchar(255),
    fencing_token bigint,
    started_us    bigint,
    fingerprint   text,
    window_ms     bigint
);

-- Writes the claim pending in this transaction, if any: finished at p_finished_at and kept
-- p_window_ms from then if it is the claim of (p_scope, p_key) with p_fencing_token, and then
-- announces it (the insert tells whether the key has waiters, saving a statement) and returns
-- true; otherwise unfinished and kept from its start by its claim's window, as a transactional
-- claim used to write its record.
CREATE FUNCTION pglock_job_write_pending(p_scope varchar, p_key text, p_fencing_token bigint,
                                         p_finished_at timestamptz, p_window_ms bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_text    text := current_setting('pglock.job_claim', true);
    v_claim   pglock_job_pending;
    v_started timestamptz;
    v_mine    boolean;
    v_waiters boolean;
BEGIN
    IF v_text IS NULL OR v_text = '' THEN
        RETURN false;
    END IF;
    v_text := set_config('pglock.job_claim', '', true) || v_text;
    v_claim := v_text::pglock_job_pending;
    v_mine := v_claim.fencing_token = p_fencing_token AND v_claim.scope = p_scope AND v_claim.job_key = p_key;
    v_started := 'epoch'::timestamptz + v_claim.started_us * interval '1 microsecond';
    IF v_claim.scope IS NULL OR length(v_claim.scope) > 255 OR octet_length(v_claim.job_key) NOT BETWEEN 1 AND 1024
       OR v_claim.holder_id IS NULL OR v_claim.holder_id = '' OR length(v_claim.holder_id) > 255
       OR v_claim.instance IS NULL OR length(v_claim.instance) > 255
       OR v_claim.window_ms NOT BETWEEN 1 AND 315360000000 OR v_started > clock_timestamp()
       OR v_claim.fencing_token IS NULL OR v_claim.fencing_token > currval('pglock_jobs_fencing_token_seq')
       OR NOT pg_try_advisory_xact_lock(pglock_job_lock_key(v_claim.scope, v_claim.job_key)) THEN
        RAISE EXCEPTION 'pglock.job_claim: not a claim of this transaction' USING ERRCODE = '22023', COLUMN = 'pglock.job_claim';
    END IF;
    INSERT INTO pglock_jobs (scope, job_key, status, holder_id, instance, attempts, fencing_token, lease_expires_at,
                             started_at, finished_at, last_error, result, fingerprint, retain_until, created_at)
    VALUES (v_claim.scope, v_claim.job_key, 'succeeded', v_claim.holder_id, v_claim.instance, 1, v_claim.fencing_token, NULL,
            v_started, CASE WHEN v_mine THEN p_finished_at END, NULL, NULL, v_claim.fingerprint,
            CASE WHEN v_mine THEN p_finished_at + p_window_ms * interval '1 millisecond'
                 ELSE v_started + v_claim.window_ms * interval '1 millisecond' END,
            v_started)
    RETURNING EXISTS (SELECT FROM pglock_job_waiters w WHERE w.scope = v_claim.scope AND w.job_key = v_claim.job_key)
    INTO v_waiters;
    IF v_mine AND v_waiters THEN
        v_waiters := pglock_job_announce(p_scope, p_key);
    END IF;
    RETURN coalesce(v_mine, false);
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_write_pending(varchar, text, bigint, timestamptz, bigint) FROM PUBLIC;

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
    v_locked   boolean;
    v_now      timestamptz;
    v_job      pglock_jobs;
    v_exists   boolean;
    v_found    boolean;
    v_claimed  boolean;
    v_text     text;
BEGIN
    -- One condition on the way through; the checks that name the argument only when it fails.
    IF p_scope IS NULL OR length(p_scope) > 255 OR p_key IS NULL OR octet_length(p_key) NOT BETWEEN 1 AND 1024
       OR p_holder_id IS NULL OR p_holder_id = '' OR length(p_holder_id) > 255 OR p_transactional IS NULL
       OR (NOT p_transactional AND pglock_ttl_ok(p_ttl_ms) IS NOT TRUE)
       OR p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000
       OR p_max_attempts IS NULL OR p_max_attempts < 0
       OR p_idle_timeout_ms IS NULL OR p_idle_timeout_ms < 0 OR p_idle_timeout_ms > 2147483647 THEN
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
        RAISE EXCEPTION 'p_idle_timeout_ms: must be from 0 (none) to 2147483647' USING ERRCODE = '22023', COLUMN = 'p_idle_timeout_ms';
    END IF;
    -- A claim pending in this transaction is written first: this claim may be of its key.
    IF current_setting('pglock.job_claim', true) <> '' THEN
        PERFORM pglock_job_write_pending(NULL, NULL, NULL, NULL, NULL);
    END IF;
    -- The lock first, then the read: once held, only an attempt finishing (or the record
    -- forgotten or collected) changes what the read found, and no claim elsewhere writes.
    v_lock_key := pglock_job_lock_key(p_scope, p_key);
    v_locked := pg_try_advisory_xact_lock(v_lock_key);
    -- Twice at most: the record may change between the read and the write only by an attempt
    -- finishing, which happens once.
    FOR i IN 1..2 LOOP
        v_now := clock_timestamp();
        SELECT * INTO v_job FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key;
        v_exists := FOUND;
        -- A record counts within its retention, and always while a lease on it is live.
        v_found := v_exists AND (v_job.retain_until > v_now OR (v_job.status = 'running' AND v_job.lease_expires_at > v_now));
        IF v_found THEN
            IF p_fingerprint IS NOT NULL AND v_job.fingerprint IS NOT NULL AND v_job.fingerprint <> p_fingerprint THEN
                RETURN pglock_job_answer_of('mismatch', v_job, v_lock_key);
            ELSIF v_job.status = 'succeeded' THEN
                RETURN pglock_job_answer_of('done', v_job, v_lock_key);
            ELSIF v_job.status = 'running' AND v_job.lease_expires_at > v_now THEN
                RETURN pglock_job_answer_of('running', v_job, v_lock_key);
            ELSIF p_max_attempts > 0 AND v_job.attempts >= p_max_attempts THEN
                -- Failed, or running under a lease that expired: its runner vanished, and a
                -- crashed attempt counts.
                RETURN pglock_job_answer_of('gave_up', v_job, v_lock_key);
            END IF;
        ELSE
            v_job := NULL;
        END IF;
        IF NOT v_locked THEN
            -- A claim in a transaction that has not ended holds it.
            RETURN pglock_job_answer_of('running', v_job, v_lock_key);
        END IF;

        v_now := clock_timestamp();
        IF p_transactional AND NOT v_exists AND current_setting('transaction_isolation') = 'read committed' THEN
            -- No record: pglock_job_finish_tx writes it. (Only under READ COMMITTED, where the
            -- read after the lock sees every record committed before it.)
            v_job := ROW(p_scope, p_key, 'succeeded', p_holder_id, coalesce(p_instance, ''), 1,
                         nextval('pglock_jobs_fencing_token_seq'), NULL, v_now, NULL, NULL, NULL, p_fingerprint,
                         v_now + p_window_ms * interval '1 millisecond', v_now)::pglock_jobs;
            v_text := set_config('pglock.job_claim',
                ROW(p_scope, p_key, v_job.holder_id, v_job.instance, v_job.fencing_token,
                    (extract(epoch FROM v_now) * 1000000)::bigint, p_fingerprint, p_window_ms)::pglock_job_pending::text, true);
            v_claimed := true;
        ELSE
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
            v_claimed := FOUND;
        END IF;
        IF v_claimed THEN
            IF p_transactional AND p_idle_timeout_ms > 0 THEN
                -- current_setting shows it as '0' (none, the default) or with a unit interval
                -- input reads ('30s', '1min'); pg_settings would cost listing every setting.
                v_text := current_setting('idle_in_transaction_session_timeout');
                IF v_text = '0' OR extract(epoch FROM v_text::interval) * 1000 > p_idle_timeout_ms THEN
                    v_text := set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true);
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

-- As 000001's, and a claim pending in this transaction is written here, finished.
CREATE OR REPLACE FUNCTION pglock_job_finish_tx(p_scope varchar, p_key text, p_fencing_token bigint, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_told boolean;
BEGIN
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    IF NOT pglock_job_write_pending(p_scope, p_key, p_fencing_token, v_now, p_window_ms) THEN
        -- This claim wrote its record (and another's pending one is now written, unfinished).
        UPDATE pglock_jobs j
           SET finished_at = v_now, retain_until = v_now + p_window_ms * interval '1 millisecond'
         WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
           AND j.status = 'succeeded' AND j.finished_at IS NULL;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        v_told := pglock_job_announce(p_scope, p_key); -- an expression, not PERFORM: see above
    END IF;
    RETURN v_now;
END;
$$;

-- p_finished_at, pglock_job_finish_tx's answer, or an error (SQLSTATE P0002) when it is NULL:
-- the transaction holds no claim of (p_scope, p_key) with that token (one lost to a RESET of
-- pglock.job_claim, or never made). For callers that send COMMIT in the same round trip: the
-- error keeps the COMMIT from running, so no effect commits without its record.
CREATE FUNCTION pglock_job_require_claim(p_finished_at timestamptz, p_scope varchar, p_key text)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_finished_at IS NULL THEN
        RAISE EXCEPTION 'this transaction holds no claim of job % in scope %', p_key, p_scope
            USING ERRCODE = 'P0002', COLUMN = 'p_key';
    END IF;
    RETURN p_finished_at;
END;
$$;

COMMIT;
