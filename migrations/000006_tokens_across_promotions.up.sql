-- Fencing tokens that never repeat across a promotion. Until now every token came from a plain
-- sequence: after an asynchronous failover the promoted standby went on from the last value it
-- had received, and handed out again the tokens its old primary had given since, so a resource
-- that kept the last token it accepted took writes from two holders with the same token, unless
-- an operator advanced the sequences by hand. Now each token is drawn by pglock_next_token, which
-- keeps an epoch in the token's high bits that follows the server's timeline: every promotion
-- (and point-in-time recovery) starts a new timeline, and the first token drawn on it moves the
-- sequence to a new epoch, above anything an earlier timeline handed out. Tokens stay bigints that
-- only grow; those issued before this migration are all smaller than the first one after it.
--
-- The functions that draw tokens are redefined with pglock_next_token in place of nextval, their
-- bodies otherwise as their latest migration left them (000001; pglock_job_claim, 000003), but
-- for pglock_release, which no longer passes over a first waiter whose place is being written.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- The timeline this server writes WAL on: 1 for a cluster never promoted, one more with each
-- promotion. Read from the name of the WAL segment being written, which a promoted server
-- switches at once (Patroni reads it the same way); pg_control_checkpoint() would still say the
-- old one until the end-of-recovery checkpoint completes, minutes later when spread. The
-- argument must stay the volatile insert position: pg_walfile_name is IMMUTABLE, and a constant
-- one could be folded into a plan that keeps an old answer.
CREATE FUNCTION pglock_timeline()
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    SELECT ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint
$$;

REVOKE ALL ON FUNCTION pglock_timeline() FROM PUBLIC;

-- Moves p_seq to the first token of the next epoch that matches p_timeline (modulo 1024) unless
-- it is there already, and draws from it. A session-level advisory lock, released at once,
-- serializes the move (setval and nextval are not transactional: nothing needs it until
-- commit), so two sessions never move the sequence back.
CREATE FUNCTION pglock_new_epoch(p_seq regclass, p_timeline bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_key   bigint := pg_catalog.hashtextextended('pglock_next_token', p_seq::oid::bigint);
    v_epoch bigint;
    v_step  bigint;
    v_token bigint;
BEGIN
    PERFORM pg_catalog.pg_advisory_lock(v_key);
    BEGIN
        EXECUTE pg_catalog.format('SELECT last_value >> 40 FROM %s', p_seq) INTO v_epoch;
        IF v_epoch = 0 OR v_epoch % 1024 <> p_timeline % 1024 THEN
            v_step := ((p_timeline - v_epoch) % 1024 + 1024) % 1024;
            IF v_step = 0 THEN
                v_step := 1024;
            END IF;
            PERFORM pg_catalog.setval(p_seq, (v_epoch + v_step) << 40);
        END IF;
        v_token := pg_catalog.nextval(p_seq);
    EXCEPTION WHEN OTHERS THEN
        PERFORM pg_catalog.pg_advisory_unlock(v_key);
        RAISE;
    END;
    PERFORM pg_catalog.pg_advisory_unlock(v_key);
    RETURN v_token;
END;
$$;

REVOKE ALL ON FUNCTION pglock_new_epoch(regclass, bigint) FROM PUBLIC;

-- The next fencing token from p_seq: larger than any drawn from it before, on this server or on
-- any it was promoted from. A token's high bits, from bit 40, are its epoch, which matches the
-- timeline modulo 1024: the first draw on a new timeline (a promotion, a point-in-time recovery,
-- a pg_upgrade or restore, which start again at timeline 1) finds the sequence in an epoch that
-- does not, and moves it to the next one that does (pglock_new_epoch), above every token any
-- earlier timeline drew, received here or not. Tokens drawn before this migration are in epoch
-- 0. 2^40 tokens an epoch.
CREATE FUNCTION pglock_next_token(p_seq regclass)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_token    bigint := pg_catalog.nextval(p_seq);
    v_timeline bigint := pglock_timeline();
BEGIN
    IF v_token >> 40 > 0 AND (v_token >> 40) % 1024 = v_timeline % 1024 THEN
        RETURN v_token;
    END IF;
    RETURN pglock_new_epoch(p_seq, v_timeline);
END;
$$;

REVOKE ALL ON FUNCTION pglock_next_token(regclass) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pglock_attempt(
    p_lock_name varchar,
    p_holder_id varchar,
    p_ttl_ms    bigint,
    p_metadata  jsonb   DEFAULT '{}',
    p_instance  varchar DEFAULT '',
    p_wait      boolean DEFAULT false
)
RETURNS pglock_acquisition
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lock       distributed_locks;
    v_waiter     distributed_lock_waiters;
    v_ttl        interval;
    v_now        timestamptz;
    v_fresh      boolean;
    v_last_token bigint;
    v_acquired   boolean;
    v_queued     boolean := false;
BEGIN
    -- Checked as plain expressions, which cost next to nothing; the helper that says exactly
    -- what is wrong runs only when something is.
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_metadata: must be a JSON object, got %', jsonb_typeof(p_metadata)
            USING ERRCODE = '22023', COLUMN = 'p_metadata';
    END IF;
    IF length(p_instance) > 255 THEN
        RAISE EXCEPTION 'p_instance: % characters long, the limit is 255', length(p_instance)
            USING ERRCODE = '22023', COLUMN = 'p_instance';
    END IF;
    v_ttl := p_ttl_ms * interval '1 millisecond';

    LOOP
        -- Plain reads first, in one statement: the lock, and the first live waiter in case the
        -- lock is free. A lock held by someone else is answered without locking a row or
        -- taking a transaction id (unless the caller is queued, which writes its place).
        v_now := clock_timestamp();
        SELECT l.lock_name, l.holder_id, l.fencing_token, l.acquired_at, l.expires_at, l.metadata,
               l.instance, w.holder_id, w.expires_at, w.metadata, w.instance
          INTO v_lock.lock_name, v_lock.holder_id, v_lock.fencing_token, v_lock.acquired_at,
               v_lock.expires_at, v_lock.metadata, v_lock.instance, v_waiter.holder_id,
               v_waiter.expires_at, v_waiter.metadata, v_waiter.instance
          FROM (SELECT) AS one
          LEFT JOIN distributed_locks l ON l.lock_name = p_lock_name
          LEFT JOIN LATERAL (SELECT * FROM distributed_lock_waiters w
                              WHERE w.lock_name = p_lock_name AND w.expires_at > v_now
                              ORDER BY w.waiter_seq LIMIT 1) w ON true;
        v_fresh := v_lock.lock_name IS NULL;
        IF (v_fresh OR v_lock.expires_at <= v_now)
           AND v_waiter.holder_id IS NOT NULL AND v_waiter.holder_id <> p_holder_id THEN
            -- A free lock belongs to the first live waiter, not to whoever asks first.
            v_lock := ROW(p_lock_name, v_waiter.holder_id, NULL, NULL, v_waiter.expires_at,
                          v_waiter.metadata, v_waiter.instance)::distributed_locks;
        END IF;

        IF v_lock.holder_id IS NOT NULL AND v_lock.holder_id <> p_holder_id
           AND v_lock.expires_at > v_now THEN
            IF p_wait THEN
                SELECT * INTO v_waiter FROM distributed_lock_waiters w
                 WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
                -- Rewrite the place only when a third of its life has gone: repeated polls
                -- by a waiter stay read-only.
                IF NOT FOUND OR v_waiter.expires_at < v_now + v_ttl * 2 / 3 THEN
                    INSERT INTO distributed_lock_waiters AS w
                        (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at)
                    VALUES (p_lock_name, p_holder_id, coalesce(p_instance, ''), p_ttl_ms,
                            coalesce(p_metadata, '{}'), v_now, v_now + v_ttl)
                    ON CONFLICT (lock_name, holder_id) DO UPDATE
                        SET instance   = excluded.instance,
                            ttl_ms     = excluded.ttl_ms,
                            metadata   = excluded.metadata,
                            expires_at = excluded.expires_at;
                    -- A release may have handed us the lock, deleting our place, after we read
                    -- the lock: our write then waited for it and made a new place. The caller
                    -- would count a lease from this poll, later than the handoff; so take the
                    -- lock here instead, which renews the lease from now.
                    IF EXISTS (SELECT FROM distributed_locks l
                                WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id) THEN
                        DELETE FROM distributed_lock_waiters w
                         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
                        CONTINUE;
                    END IF;
                    v_queued := true;
                END IF;
            END IF;
            v_acquired := false;
            EXIT;
        END IF;

        INSERT INTO distributed_locks AS l
            (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
        VALUES (p_lock_name, p_holder_id, pglock_next_token('distributed_locks_fencing_token_seq'), v_now,
                v_now + v_ttl, coalesce(p_metadata, '{}'), coalesce(p_instance, ''))
        ON CONFLICT (lock_name) DO UPDATE
            SET holder_id     = excluded.holder_id,
                -- A takeover draws its token here, with the row locked. Only a live lease
                -- keeps its token: a holder that lets its lease lapse and takes the lock again
                -- gets a new one, so its writes from before are fenced off.
                fencing_token = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.fencing_token
                                     ELSE pglock_next_token('distributed_locks_fencing_token_seq') END,
                acquired_at   = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.acquired_at
                                     ELSE excluded.acquired_at END,
                expires_at    = excluded.expires_at,
                metadata      = excluded.metadata,
                instance      = excluded.instance
            WHERE l.holder_id = excluded.holder_id OR l.expires_at <= clock_timestamp()
        RETURNING l.*, pg_sequence_last_value('distributed_locks_fencing_token_seq')
             INTO v_lock.lock_name, v_lock.holder_id, v_lock.fencing_token, v_lock.acquired_at,
                  v_lock.expires_at, v_lock.metadata, v_lock.instance, v_last_token;

        IF FOUND THEN
            -- A fresh row's token was drawn in VALUES, before the row was ours. If any token was
            -- drawn since, a holder may have come and gone while our row was landing: draw again,
            -- now that it is ours, so tokens follow the order in which holders held the name.
            IF v_fresh AND v_lock.fencing_token <> v_last_token THEN
                UPDATE distributed_locks l
                   SET fencing_token = pglock_next_token('distributed_locks_fencing_token_seq')
                 WHERE l.lock_name = p_lock_name
                RETURNING l.* INTO v_lock;
            END IF;
            IF p_wait THEN
                DELETE FROM distributed_lock_waiters w
                 WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
            END IF;
            v_acquired := true;
            EXIT;
        END IF;
        -- Lost a race between the read and the upsert: read again.
    END LOOP;

    RETURN ROW(v_acquired, v_queued, v_lock.holder_id, v_lock.instance, v_lock.fencing_token,
               v_lock.acquired_at, v_lock.expires_at, v_lock.metadata, v_now);
END;
$$;

CREATE OR REPLACE FUNCTION pglock_release(p_lock_name varchar, p_holder_id varchar)
RETURNS TABLE (released boolean, handed_off boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_lock    distributed_locks;
    v_waiter  distributed_lock_waiters;
    v_first   distributed_lock_waiters;
    v_now     timestamptz;
    v_timeout text;
BEGIN
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    released := false;
    handed_off := false;

    -- The lock row first, waiter rows after: an acquirer locks them in the same order, and the
    -- one wait for a waiter's row (below) is bounded, so that a release never deadlocks.
    DELETE FROM distributed_locks l
     WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
    RETURNING l.* INTO v_lock;
    IF NOT FOUND THEN
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
        IF FOUND THEN
            RETURN NEXT;
            RETURN;
        END IF;
        -- Neither the lock nor a place: but a handoff to the caller, or its own poll taking the
        -- lock, may have committed while the delete above waited for the place's row. That
        -- commit deleted the place and wrote the lock row, which the first delete's snapshot
        -- could not see and this statement's does.
        DELETE FROM distributed_locks l
         WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
        RETURNING l.* INTO v_lock;
        IF NOT FOUND THEN
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    released := true;

    IF NOT EXISTS (SELECT FROM distributed_lock_waiters w WHERE w.lock_name = p_lock_name) THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    -- In one statement: forget the releaser's own place in the queue (a poll of its own can have
    -- written one just as a release handed it the lock), and take the first live waiter's place
    -- that no other statement holds. Places that expired are passed over (pglockctl gc removes
    -- them).
    v_now := clock_timestamp();
    WITH own_place AS (
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id
    )
    SELECT w.* INTO v_waiter FROM distributed_lock_waiters w
     WHERE w.lock_name = p_lock_name AND w.holder_id <> p_holder_id AND w.expires_at > v_now
     ORDER BY w.waiter_seq LIMIT 1
       FOR UPDATE SKIP LOCKED;
    -- A place passed over ahead of it is being written by another statement: the renewal of
    -- its place, the waiter's own poll, each a moment. Passing it over would free the lock (or
    -- hand it on) ahead of that waiter, to whoever asks next: a resigned leader campaigning
    -- again. So wait for it, but briefly (the caller's lock_timeout, or 250 ms without one):
    -- held longer (a poll in a transaction left open, or two releases of one transaction
    -- crossing a renewal of both places), it is passed over as before, rather than stall the
    -- release or deadlock with it (250 ms is below PostgreSQL's default deadlock_timeout, so the
    -- release is not the transaction a deadlock ends).
    IF EXISTS (SELECT FROM distributed_lock_waiters w
                WHERE w.lock_name = p_lock_name AND w.holder_id <> p_holder_id AND w.expires_at > v_now
                  AND (v_waiter.holder_id IS NULL OR w.waiter_seq < v_waiter.waiter_seq)) THEN
        v_timeout := current_setting('lock_timeout');
        BEGIN
            IF v_timeout::interval = interval '0' THEN
                PERFORM set_config('lock_timeout', '250ms', true);
            END IF;
            -- With LIMIT, a locking read whose row is deleted while it waits (the waiter left)
            -- takes the next one.
            SELECT w.* INTO v_first FROM distributed_lock_waiters w
             WHERE w.lock_name = p_lock_name AND w.holder_id <> p_holder_id AND w.expires_at > v_now
             ORDER BY w.waiter_seq LIMIT 1
               FOR UPDATE;
            IF v_first.holder_id IS NOT NULL THEN
                v_waiter := v_first;
            END IF;
            PERFORM set_config('lock_timeout', v_timeout, true);
        EXCEPTION WHEN lock_not_available THEN
            NULL; -- keep the place SKIP LOCKED found, if any (lock_timeout is restored with the block)
        END;
    END IF;
    IF v_waiter.holder_id IS NULL THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    DELETE FROM distributed_lock_waiters w
     WHERE w.lock_name = p_lock_name AND w.holder_id = v_waiter.holder_id;
    handed_off := true;

    -- The name is ours until commit (we deleted its row), so drawing the token here keeps
    -- tokens in holding order. The lease starts now, after the waiter's last write of its
    -- place, from which the waiter counts it.
    v_now := clock_timestamp();
    INSERT INTO distributed_locks AS l
        (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
    VALUES (p_lock_name, v_waiter.holder_id, pglock_next_token('distributed_locks_fencing_token_seq'), v_now,
            v_now + v_waiter.ttl_ms * interval '1 millisecond', v_waiter.metadata, v_waiter.instance)
    RETURNING l.* INTO v_lock;
    PERFORM pg_notify('pglock_handoff', json_build_object(
        'lock_name', v_lock.lock_name, 'holder_id', v_lock.holder_id,
        'fencing_token', v_lock.fencing_token, 'expires_at', v_lock.expires_at)::text);
    RETURN NEXT;
END;
$$;

CREATE OR REPLACE FUNCTION pglock_semaphore_attempt(p_name varchar, p_holder_id varchar, p_permits integer, p_ttl_ms bigint,
                                         p_metadata jsonb, p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, queued boolean, lock_name varchar, fencing_token bigint, expires_at timestamptz,
               holders integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_queue  varchar;
    v_prefix varchar;
    v_now    timestamptz;
    v_seq    bigint;
    v_ahead  integer;
BEGIN
    IF p_name IS NULL OR p_name = '' OR strpos(p_name, '/') > 0 OR p_holder_id IS NULL OR p_holder_id = ''
       OR length('pglock.semaphore/' || p_name || '/' || p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_name: a semaphore''s name has no ''/'', and its holder rows are named ''pglock.semaphore/<name>/<holder>'', at most 255 characters'
            USING ERRCODE = '22023', COLUMN = 'p_name';
    ELSIF p_permits IS NULL OR p_permits < 1 THEN
        RAISE EXCEPTION 'p_permits: must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_permits';
    ELSIF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    -- A snapshot older than the advisory lock would miss holders admitted meanwhile.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pglock_semaphore_attempt runs only in READ COMMITTED transactions, not %',
            current_setting('transaction_isolation') USING ERRCODE = '0A000';
    END IF;
    v_queue := 'pglock.semaphore/' || p_name;
    v_prefix := v_queue || '/';
    PERFORM pg_advisory_xact_lock(pglock_advisory_key(p_name, 'pglock.semaphore'));
    v_now := clock_timestamp();
    acquired := false;
    queued := false;

    -- Expired places go first. Deleting waits for what holds their rows: a renewal under way
    -- (checked again once it commits: a place renewed in time is kept) and a fenced
    -- transaction (FOR SHARE), so that no place is given while a holder could still act.
    DELETE FROM distributed_locks l
     WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0'
       AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0') AND l.expires_at <= v_now;

    SELECT count(*) INTO holders FROM distributed_locks l
     WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0' -- the index's
       AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0') AND l.expires_at > v_now;
    SELECT w.waiter_seq INTO v_seq FROM distributed_lock_waiters w
     WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
    SELECT count(*) INTO v_ahead FROM distributed_lock_waiters w
     WHERE w.lock_name = v_queue AND w.expires_at > v_now AND w.holder_id <> p_holder_id
       AND (v_seq IS NULL OR w.waiter_seq < v_seq);

    IF holders + v_ahead < p_permits THEN
        INSERT INTO distributed_locks AS l (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
        VALUES (v_prefix || p_holder_id, p_holder_id, pglock_next_token('distributed_locks_fencing_token_seq'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond', coalesce(p_metadata, '{}'), coalesce(p_instance, ''))
        RETURNING l.lock_name, l.fencing_token, l.expires_at INTO lock_name, fencing_token, expires_at;
        DELETE FROM distributed_lock_waiters w WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
        acquired := true;
        holders := holders + 1;
    ELSIF p_wait THEN
        INSERT INTO distributed_lock_waiters AS w (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at)
        VALUES (v_queue, p_holder_id, coalesce(p_instance, ''), p_ttl_ms, coalesce(p_metadata, '{}'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT ON CONSTRAINT distributed_lock_waiters_pkey DO UPDATE SET expires_at = excluded.expires_at;
        queued := v_seq IS NULL;
    END IF;
    RETURN NEXT;
END;
$$;

CREATE OR REPLACE FUNCTION pglock_cron_start(p_schedule varchar, p_id bigint, p_time timestamptz, p_kind text,
    p_instance varchar, p_ttl_ms bigint, p_now timestamptz)
RETURNS pglock_cron_claimed
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    r pglock_cron_runs;
BEGIN
    IF p_id IS NULL THEN
        INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, instance, fencing_token,
                                      lease_expires_at, created_at, started_at)
        VALUES (p_schedule, p_time, p_kind, 'running', 1, p_instance, pglock_next_token('pglock_cron_runs_fencing_token_seq'),
                p_now + p_ttl_ms * interval '1 millisecond', p_now, p_now)
        RETURNING * INTO r;
    ELSE
        UPDATE pglock_cron_runs
           SET status = 'running', instance = p_instance, fencing_token = pglock_next_token('pglock_cron_runs_fencing_token_seq'),
               lease_expires_at = p_now + p_ttl_ms * interval '1 millisecond', started_at = p_now
         WHERE id = p_id
        RETURNING * INTO r;
    END IF;
    RETURN ROW('run', r.schedule, r.id, r.scheduled_time, r.kind, r.attempt, r.fencing_token,
               r.lease_expires_at, NULL, p_now)::pglock_cron_claimed;
END;
$$;

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

COMMIT;
