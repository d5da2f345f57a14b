-- Job deduplication: claims, attempts with fencing tokens, answers kept for a window, waiters.

-- The functions that find a record by its key do so with sequential scans disabled: a session
-- keeps the plans PL/pgSQL makes for its statements, and a plan made while the table was empty
-- by its statistics (a DBA's ANALYZE right after install) scans it, however large it has grown
-- since, until it is analysed again (TestClaimsKeepThePrimaryKeyAfterAnAnalyzeOfTheEmptyTable).
-- For one key the primary key costs about the same in a small table, and a fraction in a large one.
--
-- The claim's helpers are cheap to call. In PL/pgSQL only an expression (an assignment, a
-- condition, a RETURN) runs without the executor; PERFORM and every statement start and stop
-- it, which costs more than most of what they run. So the key's lock key and the answer are
-- SQL functions that the planner inlines into the expression that calls them (the lock key is
-- STABLE, as convert_to is: IMMUTABLE with a STABLE body is not inlined), and the announcement
-- returns whether it sent one, so that callers can call it in an expression.
--
-- The advisory lock key of a job (one bigint): pglock_advisory_key of the key in the namespace
-- 'pglock.jobs/' || scope, whose formula this repeats. Advisory names in namespaces starting
-- 'pglock.jobs/' are reserved.
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

-- Whether p_window_ms (a record's retention) is from 1 ms to 3650 days: inlined into the callers'
-- checks, as pglock_ttl_ok is; pglock_job_raise_bad_window says what is wrong.
CREATE OR REPLACE FUNCTION pglock_job_window_ok(p_window_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_window_ms OPERATOR(pg_catalog.>=) 1 AND p_window_ms OPERATOR(pg_catalog.<=) 315360000000;

-- Raises SQLSTATE 22023 with COLUMN p_window_ms for a retention pglock_job_window_ok refuses.
CREATE OR REPLACE FUNCTION pglock_job_raise_bad_window(p_window_ms bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
        USING ERRCODE = '22023', COLUMN = 'p_window_ms';
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_raise_bad_window(bigint) FROM PUBLIC;

-- SQLSTATE 22023, COLUMN naming the argument, unless scope and key can name a job.
CREATE OR REPLACE FUNCTION pglock_job_check_key(p_scope varchar, p_key text)
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

REVOKE ALL ON FUNCTION pglock_job_check_key(varchar, text) FROM PUBLIC;

-- p_finished_at, pglock_job_finish_tx's answer, or an error (SQLSTATE P0002) when it is NULL:
-- the transaction holds no claim of (p_scope, p_key) with that token (one lost to a RESET of
-- pglock.job_claim, or never made). For callers that send COMMIT in the same round trip: the
-- error keeps the COMMIT from running, so no effect commits without its record.
CREATE OR REPLACE FUNCTION pglock_job_require_claim(p_finished_at timestamptz, p_scope varchar, p_key text)
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

-- Writes the claim pending in this transaction, if any: finished at p_finished_at and kept
-- p_window_ms from then if it is the claim of (p_scope, p_key) with p_fencing_token, and then
-- announces it (the insert tells whether the key has waiters, saving a statement) and returns
-- true; otherwise unfinished (status 'succeeded', no finish time) and kept from its start by
-- its claim's window, as a claim under another isolation level writes it.
CREATE OR REPLACE FUNCTION pglock_job_write_pending(p_scope varchar, p_key text, p_fencing_token bigint,
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

-- SQLSTATE 22023, COLUMN naming the argument, unless a claim's arguments are valid: the rules
-- of pglock_job_claim's arguments, which it checks in one condition and then here only when that
-- fails, and which pglock_job_claim_many checks here once.
CREATE OR REPLACE FUNCTION pglock_job_check_claim(p_scope varchar, p_key text, p_holder_id varchar, p_transactional boolean,
                                                  p_ttl_ms bigint, p_window_ms bigint, p_max_attempts integer,
                                                  p_idle_timeout_ms bigint, p_mode text, p_period_ms bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
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
    IF pglock_job_window_ok(p_window_ms) IS NOT TRUE THEN
        PERFORM pglock_job_raise_bad_window(p_window_ms);
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 0 THEN
        RAISE EXCEPTION 'p_max_attempts: must be 0 (no limit) or more' USING ERRCODE = '22023', COLUMN = 'p_max_attempts';
    END IF;
    IF p_idle_timeout_ms IS NULL OR p_idle_timeout_ms < 0 OR p_idle_timeout_ms > 2147483647 THEN
        RAISE EXCEPTION 'p_idle_timeout_ms: must be from 0 (none) to 2147483647' USING ERRCODE = '22023', COLUMN = 'p_idle_timeout_ms';
    END IF;
    IF p_mode IS NULL OR p_mode NOT IN ('window', 'while_running', 'per_period', 'supersede') THEN
        RAISE EXCEPTION 'p_mode: must be window, while_running, per_period or supersede, got %', coalesce(p_mode, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_mode';
    END IF;
    IF p_mode = 'supersede' AND p_max_attempts <> 0 THEN
        RAISE EXCEPTION 'p_max_attempts: must be 0 in mode supersede, where every delivery runs' USING ERRCODE = '22023', COLUMN = 'p_max_attempts';
    END IF;
    IF p_mode = 'per_period' AND pglock_job_window_ok(p_period_ms) IS NOT TRUE THEN
        RAISE EXCEPTION 'p_period_ms: must be from 1 ms to 3650 days in mode per_period, got %', coalesce(p_period_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_period_ms';
    END IF;
    IF p_mode = 'per_period' AND p_window_ms < p_period_ms THEN
        RAISE EXCEPTION 'p_window_ms: must be at least p_period_ms (%) in mode per_period, got %', p_period_ms, p_window_ms
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    IF p_mode <> 'per_period' AND p_period_ms IS NOT NULL THEN
        RAISE EXCEPTION 'p_period_ms: must be NULL but in mode per_period' USING ERRCODE = '22023', COLUMN = 'p_period_ms';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_check_claim(varchar, text, varchar, boolean, bigint, bigint, integer, bigint, text, bigint) FROM PUBLIC;

-- Bounds the calling transaction's idle_in_transaction_session_timeout to p_idle_timeout_ms
-- when positive (never loosening a stricter one), as a claim inside a transaction does, so that
-- a caller that vanishes mid-transaction holds its keys no longer; returns the setting's new
-- value, or NULL when it is unchanged. current_setting shows it as '0' (none, the default) or
-- with a unit interval input reads ('30s', '1min'); pg_settings would cost listing every
-- setting. A SQL function, inlined into the expression that calls it.
CREATE OR REPLACE FUNCTION pglock_job_bound_idle(p_idle_timeout_ms bigint)
RETURNS text
LANGUAGE sql VOLATILE
AS $$
    SELECT CASE WHEN p_idle_timeout_ms > 0
                 AND (current_setting('idle_in_transaction_session_timeout') = '0'
                      OR extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000 > p_idle_timeout_ms)
                THEN set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true) END
$$;

REVOKE ALL ON FUNCTION pglock_job_bound_idle(bigint) FROM PUBLIC;

-- Claims a delivery of (p_scope, p_key) for the holder p_holder_id of instance p_instance, in one
-- statement, and answers with the outcome and the record:
--   done      it succeeded before, and the record is within its retention and its cycle (see
--             p_mode): do nothing;
--   running   another attempt is under way (a live lease, or a claim in a transaction that has
--             not ended): do nothing, or wait for its outcome (see pglock_job_await);
--   gave_up   it was claimed p_max_attempts times (0: no limit) in its cycle and the last attempt
--             failed, or its runner vanished;
--   mismatch  the record's fingerprint is not p_fingerprint (a NULL on either side matches);
--   claimed   this delivery runs it: a new record, or one that had failed, whose lease expired
--             (its runner vanished), whose retention or cycle ended (never while a lease on it
--             is live), or, in mode supersede, one running under a live lease. attempts counts
--             the claims of the record in its cycle, fencing_token is the attempt's.
-- p_mode says when a record's cycle ends, so that the next delivery runs afresh (attempts 1):
--   window         when its retention ends (p_window_ms after its outcome): the default;
--   while_running  also once it succeeded: a duplicate is refused only while an attempt runs;
--   per_period     also when the period of p_period_ms its first claim fell in has passed:
--                  periods are counted from the Unix epoch (UTC), so that every instance's
--                  periods are the same; p_window_ms must be at least p_period_ms, so that the
--                  record outlives its period;
--   supersede      as window, and a delivery of a key running under a live lease takes it over
--                  with a new fencing token: the superseded attempt's renewals, fence checks
--                  (pglock_job_fence) and outcome are refused from then, and its fencing token
--                  is announced on the channel pglock_job_superseded when the claim commits, so
--                  that its runner stops at once; last_error says which attempt superseded which.
--                  A key a transaction holds (a claim inside one) answers running, with a new
--                  fencing_token: the caller asks that transaction's runner to stop, NOTIFY
--                  pglock_job_superseded with 'lock:<lock_key>:<fencing_token>' (a runner stops
--                  only for a token larger than its own), and claims again once it has ended.
-- Outside a transaction (p_transactional false) the record is 'running' under a lease of
-- p_ttl_ms, renewed by pglock_job_renew and ended by pglock_job_finish. Inside the caller's
-- transaction (p_transactional true), the record is written in that transaction, so that
-- whatever commits it commits the outcome with the effects, and a rollback leaves the key to the
-- next delivery: the caller calls pglock_job_finish_tx just before COMMIT, and after a rollback
-- records a failure with a claim outside a transaction and pglock_job_finish. Under READ
-- COMMITTED a claim of a key without a record writes nothing yet: it leaves the record in the
-- transaction-local setting pglock.job_claim (pglock_job_pending's text form), and
-- pglock_job_finish_tx inserts it finished, so that a delivery writes its record once; a second
-- claim in the same transaction first writes a pending one, and other isolation levels write
-- it at the claim ('succeeded'). The claim takes the key's advisory lock before it reads, and
-- inside a transaction that lock lasts until the transaction ends; with p_idle_timeout_ms > 0
-- the transaction's idle_in_transaction_session_timeout is at most that (never loosened), so
-- that a caller that vanishes mid-transaction holds the key no longer. p_window_ms is the
-- retention of the record from now (and from its outcome, which pglock_job_finish sets). A
-- claim never waits for another: not for a row lock held by an attempt, nor for the
-- uncommitted insert of one; except that a supersede waits for a transaction that checked the
-- running attempt's fence (pglock_job_fence) to end, so that what it wrote precedes the new
-- attempt, and for another supersede's claim of the key (it then supersedes that one).
CREATE OR REPLACE FUNCTION pglock_job_claim_in_mode(
    p_scope varchar, p_key text, p_holder_id varchar, p_instance varchar, p_transactional boolean,
    p_ttl_ms bigint, p_fingerprint text, p_window_ms bigint, p_max_attempts integer,
    p_idle_timeout_ms bigint, p_mode text, p_period_ms bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_lock_key   bigint;
    v_locked     boolean;
    v_now        timestamptz;
    v_job        pglock_jobs;
    v_exists     boolean;
    v_found      boolean;
    v_claimed    boolean;
    v_superseded bigint;
    v_text       text;
BEGIN
    -- One condition on the way through; the checks that name the argument only when it fails.
    IF p_scope IS NULL OR length(p_scope) > 255 OR p_key IS NULL OR octet_length(p_key) NOT BETWEEN 1 AND 1024
       OR p_holder_id IS NULL OR p_holder_id = '' OR length(p_holder_id) > 255 OR p_transactional IS NULL
       OR (NOT p_transactional AND pglock_ttl_ok(p_ttl_ms) IS NOT TRUE)
       OR pglock_job_window_ok(p_window_ms) IS NOT TRUE
       OR p_max_attempts IS NULL OR p_max_attempts < 0
       OR p_idle_timeout_ms IS NULL OR p_idle_timeout_ms < 0 OR p_idle_timeout_ms > 2147483647
       OR (CASE p_mode WHEN 'window' THEN p_period_ms IS NULL WHEN 'while_running' THEN p_period_ms IS NULL
                       WHEN 'supersede' THEN p_period_ms IS NULL AND p_max_attempts = 0
                       WHEN 'per_period' THEN pglock_job_window_ok(p_period_ms) AND p_window_ms >= p_period_ms
                       ELSE false END) IS NOT TRUE THEN
        PERFORM pglock_job_check_claim(p_scope, p_key, p_holder_id, p_transactional, p_ttl_ms, p_window_ms,
                                       p_max_attempts, p_idle_timeout_ms, p_mode, p_period_ms);
    END IF;
    -- A claim pending in this transaction is written first: this claim may be of its key.
    IF current_setting('pglock.job_claim', true) <> '' THEN
        PERFORM pglock_job_write_pending(NULL, NULL, NULL, NULL, NULL);
    END IF;
    -- The lock first, then the read: once held, only an attempt finishing (or the record
    -- forgotten or collected) changes what the read found, and no claim elsewhere writes.
    v_lock_key := pglock_job_lock_key(p_scope, p_key);
    IF p_mode = 'supersede' AND NOT p_transactional THEN
        -- Every delivery runs: one behind another supersede's claim (which may wait for a fenced
        -- transaction) waits for it, then supersedes it in turn. (In a transaction, the key's
        -- lock would be held until it ends: the caller asks the holder to stop, and claims again.)
        PERFORM pg_advisory_xact_lock(v_lock_key);
        v_locked := true;
    ELSE
        v_locked := pg_try_advisory_xact_lock(v_lock_key);
    END IF;
    -- Twice at most: the record may change between the read and the write only by an attempt
    -- finishing, which happens once.
    FOR i IN 1..2 LOOP
        v_now := clock_timestamp();
        SELECT * INTO v_job FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key;
        v_exists := FOUND;
        -- A record counts within its retention and cycle, and always while a lease on it is live.
        v_found := v_exists AND ((v_job.status = 'running' AND v_job.lease_expires_at > v_now)
                                 OR NOT pglock_job_cycle_ended(v_job.retain_until, v_job.status, v_job.created_at,
                                                               v_now, p_mode, p_period_ms));
        v_superseded := NULL;
        IF v_found THEN
            IF p_fingerprint IS NOT NULL AND v_job.fingerprint IS NOT NULL AND v_job.fingerprint <> p_fingerprint THEN
                RETURN pglock_job_answer_of('mismatch', v_job, v_lock_key);
            ELSIF v_job.status = 'succeeded' THEN
                RETURN pglock_job_answer_of('done', v_job, v_lock_key);
            ELSIF v_job.status = 'running' AND v_job.lease_expires_at > v_now THEN
                IF p_mode <> 'supersede' THEN
                    RETURN pglock_job_answer_of('running', v_job, v_lock_key);
                ELSIF v_locked THEN
                    v_superseded := v_job.fencing_token;
                END IF;
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
            IF p_mode = 'supersede' THEN
                -- The token of the caller's request to stop: larger than the holder's, smaller
                -- than any later claim's.
                v_job.fencing_token := pglock_next_token('pglock_jobs_fencing_token_seq');
            END IF;
            RETURN pglock_job_answer_of('running', v_job, v_lock_key);
        END IF;

        v_now := clock_timestamp();
        IF p_transactional AND NOT v_exists AND current_setting('transaction_isolation') = 'read committed' THEN
            -- No record: pglock_job_finish_tx writes it. (Only under READ COMMITTED, where the
            -- read after the lock sees every record committed before it.)
            v_job := ROW(p_scope, p_key, 'succeeded', p_holder_id, coalesce(p_instance, ''), 1,
                         pglock_next_token('pglock_jobs_fencing_token_seq'), NULL, v_now, NULL, NULL, NULL, p_fingerprint,
                         v_now + p_window_ms * interval '1 millisecond', v_now)::pglock_jobs;
            v_text := set_config('pglock.job_claim',
                ROW(p_scope, p_key, v_job.holder_id, v_job.instance, v_job.fencing_token,
                    (extract(epoch FROM v_now) * 1000000)::bigint, p_fingerprint, p_window_ms)::pglock_job_pending::text, true);
            v_claimed := true;
        ELSE
            INSERT INTO pglock_jobs AS j (scope, job_key, status, holder_id, instance, attempts, fencing_token,
                                          lease_expires_at, started_at, finished_at, retain_until, created_at, fingerprint)
            VALUES (p_scope, p_key, CASE WHEN p_transactional THEN 'succeeded' ELSE 'running' END,
                    p_holder_id, coalesce(p_instance, ''), 1, pglock_next_token('pglock_jobs_fencing_token_seq'),
                    CASE WHEN p_transactional THEN NULL ELSE v_now + p_ttl_ms * interval '1 millisecond' END,
                    v_now, NULL,
                    v_now + p_window_ms * interval '1 millisecond', v_now, p_fingerprint)
            ON CONFLICT (scope, job_key) DO UPDATE
               SET status = excluded.status, holder_id = excluded.holder_id, instance = excluded.instance,
                   fencing_token = excluded.fencing_token,
                   -- A supersede may have waited for a fenced transaction: its lease starts now.
                   lease_expires_at = CASE WHEN v_superseded IS NULL THEN excluded.lease_expires_at
                                           ELSE clock_timestamp() + p_ttl_ms * interval '1 millisecond' END,
                   started_at = CASE WHEN v_superseded IS NULL THEN excluded.started_at ELSE clock_timestamp() END,
                   finished_at = excluded.finished_at,
                   -- A record whose cycle ended is gone: this is a first delivery again.
                   attempts = CASE WHEN pglock_job_cycle_ended(j.retain_until, j.status, j.created_at, v_now, p_mode, p_period_ms)
                                   THEN 1 ELSE j.attempts + 1 END,
                   created_at = CASE WHEN pglock_job_cycle_ended(j.retain_until, j.status, j.created_at, v_now, p_mode, p_period_ms)
                                     THEN v_now ELSE j.created_at END,
                   -- A superseded attempt's end is its error: operators see it with the record.
                   last_error = CASE WHEN j.fencing_token = v_superseded AND j.status = 'running'
                                     THEN format('attempt %s on %s was superseded by attempt %s', j.fencing_token, j.instance,
                                                 excluded.fencing_token)
                                     WHEN pglock_job_cycle_ended(j.retain_until, j.status, j.created_at, v_now, p_mode, p_period_ms)
                                     THEN NULL ELSE j.last_error END,
                   result = NULL,
                   fingerprint = CASE WHEN pglock_job_cycle_ended(j.retain_until, j.status, j.created_at, v_now, p_mode, p_period_ms)
                                      THEN excluded.fingerprint ELSE coalesce(j.fingerprint, excluded.fingerprint) END,
                   retain_until = excluded.retain_until
             -- Not while a lease is live, but for the attempt this claim supersedes (its token).
             WHERE (NOT (j.status = 'running' AND j.lease_expires_at > v_now) OR j.fencing_token = v_superseded)
               AND (pglock_job_cycle_ended(j.retain_until, j.status, j.created_at, v_now, p_mode, p_period_ms)
                    OR ((p_fingerprint IS NULL OR j.fingerprint IS NULL OR j.fingerprint = p_fingerprint)
                        AND j.status <> 'succeeded'
                        AND (p_max_attempts = 0 OR j.attempts < p_max_attempts)))
            RETURNING * INTO v_job;
            v_claimed := FOUND;
        END IF;
        IF v_claimed THEN
            IF p_transactional THEN
                v_text := pglock_job_bound_idle(p_idle_timeout_ms);
            END IF;
            IF v_superseded IS NOT NULL THEN
                PERFORM pg_notify('pglock_job_superseded', v_superseded::text);
            END IF;
            RETURN pglock_job_answer_of('claimed', v_job, v_lock_key);
        END IF;
    END LOOP;
    -- Changed twice between read and write: only an attempt finishing changes a record this
    -- claim may not take, and it does so once.
    RETURN pglock_job_answer_of('running', v_job, v_lock_key);
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_claim_in_mode(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint, text, bigint) FROM PUBLIC;

-- pglock_job_claim_in_mode in mode window: the claim of v0.1.0, whose callers' grants stand.
CREATE OR REPLACE FUNCTION pglock_job_claim(
    p_scope varchar, p_key text, p_holder_id varchar, p_instance varchar, p_transactional boolean,
    p_ttl_ms bigint, p_fingerprint text, p_window_ms bigint, p_max_attempts integer,
    p_idle_timeout_ms bigint)
RETURNS pglock_job_answer
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT pglock_job_claim_in_mode(p_scope, p_key, p_holder_id, p_instance, p_transactional, p_ttl_ms, p_fingerprint,
                                    p_window_ms, p_max_attempts, p_idle_timeout_ms, 'window', NULL)
$$;

REVOKE ALL ON FUNCTION pglock_job_claim(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint) FROM PUBLIC;

-- Whether a record's cycle ended at p_now (see pglock_job_claim_in_mode's p_mode), so that a
-- delivery runs afresh: its retention ended; or, in mode while_running, it succeeded; or, in
-- mode per_period, its first claim fell in an earlier period. Inlined where it is called (STABLE,
-- as extract is).
CREATE OR REPLACE FUNCTION pglock_job_cycle_ended(p_retain_until timestamptz, p_status text, p_created_at timestamptz,
                                                  p_now timestamptz, p_mode text, p_period_ms bigint)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN p_retain_until OPERATOR(pg_catalog.<=) p_now
    OR (p_mode OPERATOR(pg_catalog.=) 'while_running' AND p_status OPERATOR(pg_catalog.=) 'succeeded')
    OR (p_mode OPERATOR(pg_catalog.=) 'per_period'
        AND pg_catalog.div((extract(epoch FROM p_created_at) OPERATOR(pg_catalog.*) 1000)::pg_catalog.numeric, p_period_ms)
            OPERATOR(pg_catalog.<) pg_catalog.div((extract(epoch FROM p_now) OPERATOR(pg_catalog.*) 1000)::pg_catalog.numeric, p_period_ms));

-- A claim's answer: the outcome, the record and the key's lock key.
CREATE OR REPLACE FUNCTION pglock_job_answer_of(p_outcome text, p_job pglock_jobs, p_lock_key bigint)
RETURNS pglock_job_answer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT ROW(p_outcome, p_job.status, p_job.holder_id, p_job.instance, p_job.attempts, p_job.fencing_token,
               p_job.lease_expires_at, p_job.started_at, p_job.finished_at, p_job.last_error, p_job.result,
               p_job.fingerprint, p_job.retain_until, p_job.created_at, p_lock_key)::pglock_job_answer
$$;

-- Renews the lease of the attempt with p_fencing_token for p_ttl_ms from now; returns the new
-- expiry, or NULL (changing nothing) when the attempt no longer holds an unexpired lease.
CREATE OR REPLACE FUNCTION pglock_job_renew(p_scope varchar, p_key text, p_fencing_token bigint, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    UPDATE pglock_jobs j
       SET lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()
    RETURNING j.lease_expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_renew(varchar, text, bigint, bigint) FROM PUBLIC;

-- pglock_fence for a job attempt running outside a transaction: returns its lease's expiry when
-- the attempt with p_fencing_token still runs (a live lease, not superseded nor taken over), and
-- NULL (changing nothing) otherwise. When it runs, its record stays so until the calling
-- transaction ends (FOR SHARE: a claim that would supersede it waits for that end), and that
-- transaction is bounded as pglock_fence bounds it, to the lease's time left plus p_grace_ms.
CREATE OR REPLACE FUNCTION pglock_job_fence(p_scope varchar, p_key text, p_fencing_token bigint, p_grace_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    PERFORM pglock_check_grace(p_grace_ms);
    SELECT j.lease_expires_at INTO v_expires_at
      FROM pglock_jobs j
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()
       FOR SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM pglock_bound_fenced(v_expires_at, p_grace_ms);
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_fence(varchar, text, bigint, bigint) FROM PUBLIC;

-- Renews the leases of the job attempts (p_scopes[i], p_keys[i], p_fencing_tokens[i]) for
-- p_ttl_ms[i] from now, as pglock_job_renew does one.
CREATE OR REPLACE FUNCTION pglock_job_renew_many(p_scopes varchar[], p_keys text[], p_fencing_tokens bigint[], p_ttl_ms bigint[])
RETURNS TABLE (scope varchar, job_key text, fencing_token bigint, outcome text, lease_expires_at timestamptz)
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

-- Records the outcome of the attempt with p_fencing_token, claimed outside a transaction:
-- succeeded with p_result, or failed with p_error; the record is then kept p_window_ms from now.
-- Returns when it finished (again, for the same outcome: a retry after a lost answer is no
-- error), or NULL, changing nothing, when the record is no longer that attempt's (taken over,
-- or forgotten): a runner whose lease was lost cannot mark done what another now runs. An
-- attempt whose lease expired untaken may still finish: nobody else ran it. Waiters are told
-- when the outcome commits.
CREATE OR REPLACE FUNCTION pglock_job_finish(p_scope varchar, p_key text, p_fencing_token bigint, p_succeeded boolean,
                                  p_result jsonb, p_error text, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION 'p_succeeded: must not be null' USING ERRCODE = '22023', COLUMN = 'p_succeeded';
    END IF;
    IF pglock_job_window_ok(p_window_ms) IS NOT TRUE THEN
        PERFORM pglock_job_raise_bad_window(p_window_ms);
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

REVOKE ALL ON FUNCTION pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint) FROM PUBLIC;

-- Records when the attempt claimed inside the calling transaction with p_fencing_token
-- finished, and keeps its record p_window_ms from then (not from the claim: fn may have run
-- longer than the window), and announces the outcome; call it just before COMMIT, which makes
-- the outcome true. A claim pending in this transaction (pglock.job_claim) is written here,
-- finished. Returns the finish time, or NULL when this transaction holds no such claim.
CREATE OR REPLACE FUNCTION pglock_job_finish_tx(p_scope varchar, p_key text, p_fencing_token bigint, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_told boolean;
BEGIN
    IF pglock_job_window_ok(p_window_ms) IS NOT TRUE THEN
        PERFORM pglock_job_raise_bad_window(p_window_ms);
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

-- Claims many keys of one scope inside the calling transaction, in one statement: an answer per
-- key, in the order given, as pglock_job_claim's with p_transactional true (no fingerprint).
-- The keys without a record whose advisory locks this transaction takes are claimed by one
-- insert for them all; every other key by pglock_job_claim, whose rules answer it. The claims
-- are written as pglock_job_claim writes them (unfinished, or pending under READ COMMITTED), and
-- pglock_job_finish_many finishes them just before COMMIT. From 1 to 1000 distinct keys;
-- arguments as pglock_job_claim's. As every claim, it never waits for another. It keeps the
-- locks of the keys it claimed until the transaction ends, and not those of the others (but in
-- a race: a record committed between its read and its lock), which other deliveries may take
-- over while the batch runs.
CREATE OR REPLACE FUNCTION pglock_job_claim_many(
    p_scope varchar, p_keys text[], p_holder_id varchar, p_instance varchar,
    p_window_ms bigint, p_max_attempts integer, p_idle_timeout_ms bigint)
RETURNS SETOF pglock_job_answer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_answers pglock_job_answer[];
    v_answer  pglock_job_answer;
    v_claimed record;
    v_i       bigint;
    v_text    text;
BEGIN
    IF p_keys IS NULL OR cardinality(p_keys) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'p_keys: must hold 1 to 1000 keys, got %', coalesce(cardinality(p_keys)::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_keys';
    END IF;
    -- Every argument, the first key among them; then any other key the check would refuse.
    PERFORM pglock_job_check_claim(p_scope, p_keys[1], p_holder_id, true, NULL, p_window_ms, p_max_attempts, p_idle_timeout_ms,
                                   'window', NULL);
    SELECT k INTO v_text FROM unnest(p_keys) AS k WHERE k IS NULL OR octet_length(k) NOT BETWEEN 1 AND 1024 LIMIT 1;
    IF FOUND THEN
        PERFORM pglock_job_check_key(p_scope, v_text);
    END IF;
    SELECT k INTO v_text FROM unnest(p_keys) AS k GROUP BY k HAVING count(*) > 1 LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'p_keys: key % given twice', v_text USING ERRCODE = '22023', COLUMN = 'p_keys';
    END IF;
    -- A claim pending in this transaction is written first: it may be of one of these keys.
    IF current_setting('pglock.job_claim', true) <> '' THEN
        PERFORM pglock_job_write_pending(NULL, NULL, NULL, NULL, NULL);
    END IF;
    v_answers := array_fill(NULL::pglock_job_answer, ARRAY[cardinality(p_keys)]);
    -- A key whose lock this transaction takes and that has no record is this delivery's. A
    -- record committed between the read and the lock is met by the insert, which leaves the key
    -- to pglock_job_claim; no other transaction can be inserting one, for it would hold the lock.
    FOR v_claimed IN
        WITH wanted AS (
            SELECT w.k, w.i FROM unnest(p_keys) WITH ORDINALITY AS w(k, i)
        ), recorded AS (
            -- A lookup per key, by the whole primary key, whatever the table's statistics say (a
            -- LATERAL subquery with a LIMIT is not flattened into a join: `job_key = ANY (p_keys)`
            -- was planned as a scan of the scope's whole range once the table had been analysed
            -- small).
            SELECT w.k FROM wanted w, LATERAL (SELECT FROM pglock_jobs r WHERE r.scope = p_scope AND r.job_key = w.k LIMIT 1) AS r
        ), inserted AS (
            INSERT INTO pglock_jobs AS j (scope, job_key, status, holder_id, instance, attempts, fencing_token,
                                          lease_expires_at, started_at, finished_at, retain_until, created_at, fingerprint)
            SELECT p_scope, w.k, 'succeeded', p_holder_id, coalesce(p_instance, ''), 1,
                   pglock_next_token('pglock_jobs_fencing_token_seq'), NULL, v_now, NULL,
                   v_now + p_window_ms * interval '1 millisecond', v_now, NULL
              FROM wanted w
             -- In this order (CASE): a key with a record is not locked here.
             WHERE CASE WHEN w.k IN (SELECT r.k FROM recorded r) THEN false
                        ELSE pg_try_advisory_xact_lock(pglock_job_lock_key(p_scope, w.k)) END
             ORDER BY w.i
            ON CONFLICT (scope, job_key) DO NOTHING
            RETURNING j.*
        )
        SELECT w.i, w.k, ins::pglock_jobs AS job FROM inserted ins JOIN wanted w ON w.k = ins.job_key
    LOOP
        v_answers[v_claimed.i] := pglock_job_answer_of('claimed', v_claimed.job, pglock_job_lock_key(p_scope, v_claimed.k));
    END LOOP;
    IF FOUND THEN
        v_text := pglock_job_bound_idle(p_idle_timeout_ms);
    END IF;
    FOR v_i IN 1..cardinality(p_keys) LOOP
        CONTINUE WHEN (v_answers[v_i]).outcome IS NOT NULL; -- answered by the insert
        -- In a subtransaction, rolled back unless it claimed the key: with it go the key's lock,
        -- which the batch's transaction would otherwise keep while it runs, and whatever the claim
        -- wrote first (a pending claim, written again at the next claim or at the finish).
        BEGIN
            v_answer := pglock_job_claim_in_mode(p_scope, p_keys[v_i], p_holder_id, p_instance, true, NULL, NULL,
                                                 p_window_ms, p_max_attempts, p_idle_timeout_ms, 'window', NULL);
            v_answers[v_i] := v_answer;
            IF v_answer.outcome <> 'claimed' THEN
                RAISE EXCEPTION USING ERRCODE = 'PGLK1'; -- the answer stays in v_answers
            END IF;
        EXCEPTION WHEN SQLSTATE 'PGLK1' THEN
        END;
    END LOOP;
    RETURN QUERY SELECT a.* FROM unnest(v_answers) AS a;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_claim_many(varchar, text[], varchar, varchar, bigint, integer, bigint) FROM PUBLIC;

-- Records when the attempts claimed inside the calling transaction with pglock_job_claim_many
-- (the keys claimed, with their tokens) finished, keeps their records p_window_ms from then,
-- and announces the outcomes of those with waiters; call it just before COMMIT. Returns the
-- finish time, or NULL when this transaction does not hold every one of these claims.
CREATE OR REPLACE FUNCTION pglock_job_finish_many(p_scope varchar, p_keys text[], p_fencing_tokens bigint[], p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_finished bigint;
BEGIN
    IF pglock_job_window_ok(p_window_ms) IS NOT TRUE THEN
        PERFORM pglock_job_raise_bad_window(p_window_ms);
    END IF;
    IF p_keys IS NULL OR p_fencing_tokens IS NULL OR cardinality(p_keys) <> cardinality(p_fencing_tokens)
       OR array_position(p_fencing_tokens, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_fencing_tokens: must hold a token per key' USING ERRCODE = '22023', COLUMN = 'p_fencing_tokens';
    END IF;
    IF array_position(p_keys, NULL) IS NOT NULL
       OR (SELECT count(DISTINCT k) FROM unnest(p_keys) AS k) <> cardinality(p_keys) THEN
        RAISE EXCEPTION 'p_keys: must be distinct keys' USING ERRCODE = '22023', COLUMN = 'p_keys';
    END IF;
    -- A claim pending in this transaction is written (unfinished) first: it may be of one of these.
    IF current_setting('pglock.job_claim', true) <> '' THEN
        PERFORM pglock_job_write_pending(NULL, NULL, NULL, NULL, NULL);
    END IF;
    -- The claims' records, found a key at a time by the whole primary key (as in
    -- pglock_job_claim_many), then updated by their row ids: this transaction wrote them, and
    -- holds their keys' locks, so nothing else can have moved them.
    UPDATE pglock_jobs j
       SET finished_at = v_now, retain_until = v_now + p_window_ms * interval '1 millisecond'
     WHERE j.ctid = ANY (ARRAY(
               SELECT r.ctid
                 FROM unnest(p_keys, p_fencing_tokens) AS c(k, t),
                      LATERAL (SELECT r.ctid FROM pglock_jobs r
                                WHERE r.scope = p_scope AND r.job_key = c.k AND r.fencing_token = c.t
                                  AND r.status = 'succeeded' AND r.finished_at IS NULL
                                LIMIT 1) AS r));
    GET DIAGNOSTICS v_finished = ROW_COUNT;
    IF v_finished <> cardinality(p_keys) THEN
        RETURN NULL;
    END IF;
    PERFORM pglock_job_announce(p_scope, c.k)
       FROM unnest(p_keys) AS c(k),
            LATERAL (SELECT FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = c.k LIMIT 1) AS w;
    RETURN v_now;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_finish_many(varchar, text[], bigint[], bigint) FROM PUBLIC;

-- Announces the outcome of (p_scope, p_key) on the channel pglock_jobs, when the transaction
-- commits, if the key has waiters, and returns whether it did; otherwise does nothing, for a
-- notification serializes commits. Called only by the SECURITY DEFINER functions of jobs, with
-- their search_path.
CREATE OR REPLACE FUNCTION pglock_job_announce(p_scope varchar, p_key text)
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

-- Registers p_waiter_id as waiting for the outcome of (p_scope, p_key) until p_ttl_ms from now
-- (again to extend it): pglock_job_finish announces outcomes of keys with waiters on the
-- channel pglock_jobs. LISTEN first, register, then claim again: an outcome committed between
-- the claim's answer and the registration would go unannounced.
CREATE OR REPLACE FUNCTION pglock_job_await(p_scope varchar, p_key text, p_waiter_id varchar, p_ttl_ms bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_waiter_id IS NULL OR p_waiter_id = '' OR length(p_waiter_id) > 255 THEN
        RAISE EXCEPTION 'p_waiter_id: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_waiter_id';
    END IF;
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    INSERT INTO pglock_job_waiters (scope, job_key, waiter_id, expires_at)
    VALUES (p_scope, p_key, p_waiter_id, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (scope, job_key, waiter_id) DO UPDATE SET expires_at = excluded.expires_at;
    RETURN pglock_job_lock_key(p_scope, p_key);
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_await(varchar, text, varchar, bigint) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pglock_job_unawait(p_scope varchar, p_key text, p_waiter_id varchar)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    DELETE FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key AND w.waiter_id = p_waiter_id;
$$;

REVOKE ALL ON FUNCTION pglock_job_unawait(varchar, text, varchar) FROM PUBLIC;

-- Deletes the record of (p_scope, p_key) so that the key may run again, after waiting for a
-- claim inside a transaction to end; an attempt running outside one loses its lease (its next
-- renewal finds the record gone). Returns the deleted record's status, NULL when there was none.
CREATE OR REPLACE FUNCTION pglock_job_forget(p_scope varchar, p_key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
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

REVOKE ALL ON FUNCTION pglock_job_forget(varchar, text) FROM PUBLIC;

-- Whether a job key still runs, for deliveries waiting for its outcome: outside a transaction
-- under a live lease (lease_left_ms: how much of it is left, NULL otherwise), or inside one
-- (its claim holds the key's advisory lock, as pg_locks shows: the lock is never taken here, so
-- that no claim finds it taken by a watcher). A plain read: a process with many deliveries
-- waiting for one key checks it once for all of them.
CREATE OR REPLACE FUNCTION pglock_job_running(p_scope varchar, p_key text)
RETURNS TABLE (running boolean, lease_left_ms bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
SET enable_seqscan = off
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

-- Deletes up to p_batch records past their retention (never one running under a live lease,
-- nor one a claim holds: those are skipped, not waited for), and registrations of waiters past
-- theirs. Returns how many records it deleted: call it until that is less than p_batch. Each
-- call is one short transaction.
CREATE OR REPLACE FUNCTION pglock_job_collect(p_batch integer)
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

REVOKE ALL ON FUNCTION pglock_job_collect(integer) FROM PUBLIC;
