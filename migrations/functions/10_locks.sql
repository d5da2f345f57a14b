-- Lease locks in distributed_locks: acquire, queue, renew, release and hand off, fence, and the
-- seed's functions.

-- The one acquire, as one pglock_acquisition value rather than a set of one row, so that a
-- query can call it inside an expression: PostgreSQL sets such a call up far more cheaply than
-- a set-returning function in FROM, even one that never runs, so a try on a held lock costs
-- little more than reading the lock row (queries/locks.sql). Takes p_lock_name for
-- p_holder_id if it is free or expired and nobody is queued ahead, or if p_holder_id holds it
-- already (which extends it and keeps its token). Otherwise, with p_wait, queues p_holder_id (or
-- refreshes its place). Returns the caller's lock when acquired, else the current holder's, or
-- the reservation of the waiter a free lock is kept for (which has no token or acquired_at yet);
-- queued says whether this call wrote the caller's place in the queue, and checked_at is the
-- database time the answer holds for. Call it in a transaction of its own: an attempt that loses
-- a race to another acquirer locks the winner's row until the caller's transaction ends.
-- In an expression, expand it once (FROM, LATERAL or OFFSET 0): (pglock_attempt(...)).* calls
-- it once per column.
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
            v_lock := NULL;
            v_lock.lock_name := p_lock_name;
            v_lock.holder_id := v_waiter.holder_id;
            v_lock.expires_at := v_waiter.expires_at;
            v_lock.metadata := v_waiter.metadata;
            v_lock.instance := v_waiter.instance;
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
        RETURNING l.lock_name, l.holder_id, l.fencing_token, l.acquired_at, l.expires_at, l.metadata, l.instance,
                  pg_sequence_last_value('distributed_locks_fencing_token_seq')
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

-- pglock_attempt's answer as a set of one row, for callers that read it with FROM.
CREATE OR REPLACE FUNCTION pglock_acquire(
    p_lock_name varchar,
    p_holder_id varchar,
    p_ttl_ms    bigint,
    p_metadata  jsonb   DEFAULT '{}',
    p_instance  varchar DEFAULT '',
    p_wait      boolean DEFAULT false
)
RETURNS TABLE (
    acquired      boolean,
    queued        boolean,
    holder_id     varchar,
    instance      varchar,
    fencing_token bigint,
    acquired_at   timestamptz,
    expires_at    timestamptz,
    metadata      jsonb,
    checked_at    timestamptz
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
        SELECT a.* FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_ms, p_metadata, p_instance, p_wait) a;
END;
$$;

REVOKE ALL ON FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

-- The one release. If p_holder_id holds the lock, hands it to the first live waiter (a new
-- token, its own TTL from now; NOTIFY pglock_handoff with a JSON payload naming it) or, with
-- nobody waiting, deletes it (NOTIFY pglock_released, payload = the lock name). Either way it
-- removes p_holder_id's own place in the queue, so a waiter that gives up calls it too; and a
-- lock handed to the caller while it ran is released as well.
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

-- Releases p_lock_name as pglock_release does if p_holder_id has held it for p_held_ms since
-- it took it; otherwise moves its lease's end to that moment (sooner or later than it was) and
-- answers it: nobody can take the lock before, and the first acquirer after takes it (no
-- handoff). The row's holder becomes 'pglock.held:' and the md5 of p_holder_id, so that no
-- renewal of p_holder_id's, one in flight included, moves the end again; a second call (a retry
-- after a lost answer) answers the same. The caller's own place in the queue, if a poll of its
-- own left one, goes, as pglock_release removes it. Returns (released, handed_off, expires_at):
-- released is false when p_holder_id did not hold the lock; expires_at is the lease's new end
-- when the release was put off, else NULL. p_held_ms must be positive (22023, COLUMN p_held_ms).
CREATE OR REPLACE FUNCTION pglock_release_after(p_lock_name varchar, p_holder_id varchar, p_held_ms bigint)
RETURNS TABLE (released boolean, handed_off boolean, expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_held varchar;
BEGIN
    IF p_held_ms IS NULL OR p_held_ms <= 0 THEN
        RAISE EXCEPTION 'p_held_ms: must be positive, not %', coalesce(p_held_ms::text, 'NULL')
            USING ERRCODE = '22023', COLUMN = 'p_held_ms';
    END IF;
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    v_held := 'pglock.held:' || md5(p_holder_id);
    UPDATE distributed_locks l
       SET expires_at = l.acquired_at + p_held_ms * interval '1 millisecond', holder_id = v_held
     WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
       AND l.expires_at > clock_timestamp()
       AND l.acquired_at + p_held_ms * interval '1 millisecond' > clock_timestamp()
    RETURNING true, false, l.expires_at INTO released, handed_off, expires_at;
    IF NOT FOUND THEN
        SELECT true, false, l.expires_at INTO released, handed_off, expires_at
          FROM distributed_locks l
         WHERE l.lock_name = p_lock_name AND l.holder_id = v_held AND l.expires_at > clock_timestamp();
    END IF;
    IF FOUND THEN
        DELETE FROM distributed_lock_waiters w WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY SELECT r.released, r.handed_off, NULL::timestamptz FROM pglock_release(p_lock_name, p_holder_id) AS r;
END;
$$;

REVOKE ALL ON FUNCTION pglock_release_after(varchar, varchar, bigint) FROM PUBLIC;

-- True if p_lock_name is held, unexpired, with p_fencing_token; it then stays so until the
-- calling transaction ends (FOR SHARE on the lock row: no release, extension, handoff or
-- takeover can commit before it). SECURITY DEFINER, so a role with only SELECT may call it.
CREATE OR REPLACE FUNCTION verify_fence(p_lock_name varchar, p_fencing_token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM 1 FROM distributed_locks l
     WHERE l.lock_name = p_lock_name
       AND l.fencing_token = p_fencing_token
       AND l.expires_at > clock_timestamp()
       FOR SHARE;
    RETURN FOUND;
END;
$$;

REVOKE ALL ON FUNCTION verify_fence(varchar, bigint) FROM PUBLIC;

-- The seed contract: the functions callers of the original skill already use, with their
-- signatures and results, now through the queue. The acquires never queue; release_lock hands
-- off. Each calls the core directly, in plpgsql, which keeps its plans from call to call (an
-- SQL-language SECURITY DEFINER function is planned at every call). acquire_lock_ms takes
-- p_lock_name for p_holder_id for p_ttl_ms milliseconds of database time, if it is free,
-- expired, or already held by p_holder_id (which extends it and keeps its token), and returns
-- one row: on success the caller's lock, otherwise the current holder's.
CREATE OR REPLACE FUNCTION acquire_lock_ms(
    p_lock_name varchar,
    p_holder_id varchar,
    p_ttl_ms    bigint,
    p_metadata  jsonb DEFAULT '{}'
)
RETURNS TABLE (
    acquired      boolean,
    holder_id     varchar,
    fencing_token bigint,
    acquired_at   timestamptz,
    expires_at    timestamptz,
    metadata      jsonb
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
        SELECT a.acquired, a.holder_id, a.fencing_token, a.acquired_at, a.expires_at, a.metadata
          FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_ms, p_metadata) a;
END;
$$;

REVOKE ALL ON FUNCTION acquire_lock_ms(varchar, varchar, bigint, jsonb) FROM PUBLIC;

-- acquire_lock_ms in seconds, answering only whether the lock was taken.
CREATE OR REPLACE FUNCTION acquire_lock(
    p_lock_name   varchar,
    p_holder_id   varchar,
    p_ttl_seconds integer DEFAULT 30,
    p_metadata    jsonb DEFAULT '{}'
)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_acquired boolean;
BEGIN
    IF pglock_ttl_ok(p_ttl_seconds * 1000::bigint) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_seconds * 1000::bigint, 'p_ttl_seconds');
    END IF;
    SELECT a.acquired INTO v_acquired
      FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a;
    RETURN v_acquired;
END;
$$;

REVOKE ALL ON FUNCTION acquire_lock(varchar, varchar, integer, jsonb) FROM PUBLIC;

-- Moves the expiry of a lock p_holder_id holds (and that has not expired) to p_ttl_ms from now.
-- Returns the new expires_at, or NULL when the lock is not held by p_holder_id.
CREATE OR REPLACE FUNCTION extend_lock_ms(p_lock_name varchar, p_holder_id varchar, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;

    UPDATE distributed_locks l
       SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE l.lock_name = p_lock_name
       AND l.holder_id = p_holder_id
       AND l.expires_at > clock_timestamp()
    RETURNING l.expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION extend_lock_ms(varchar, varchar, bigint) FROM PUBLIC;

-- extend_lock_ms in seconds: true while the lock is the caller's.
CREATE OR REPLACE FUNCTION extend_lock(p_lock_name varchar, p_holder_id varchar, p_ttl_seconds integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pglock_ttl_ok(p_ttl_seconds * 1000::bigint) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_seconds * 1000::bigint, 'p_ttl_seconds');
    END IF;
    RETURN extend_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint) IS NOT NULL;
END;
$$;

REVOKE ALL ON FUNCTION extend_lock(varchar, varchar, integer) FROM PUBLIC;

-- pglock_release, answering only whether the caller held the lock.
CREATE OR REPLACE FUNCTION release_lock(p_lock_name varchar, p_holder_id varchar)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released boolean;
BEGIN
    SELECT r.released INTO v_released FROM pglock_release(p_lock_name, p_holder_id) r;
    RETURN v_released;
END;
$$;

REVOKE ALL ON FUNCTION release_lock(varchar, varchar) FROM PUBLIC;

-- Releases p_lock_name whoever holds it, exactly as its holder's release would: the next live
-- waiter gets it (with a higher token) or waiters are told it is free. Returns the holder it
-- took the lock from; no row when the lock was not held.
CREATE OR REPLACE FUNCTION force_release_lock(p_lock_name varchar)
RETURNS TABLE (holder_id varchar, instance varchar, fencing_token bigint, expires_at timestamptz, handed_off boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_lock distributed_locks;
BEGIN
    IF p_lock_name IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, 'operator');
    END IF;
    SELECT * INTO v_lock FROM distributed_locks l WHERE l.lock_name = p_lock_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT v_lock.holder_id, v_lock.instance, v_lock.fencing_token, v_lock.expires_at, r.handed_off
          FROM pglock_release(p_lock_name, v_lock.holder_id) r;
END;
$$;

REVOKE ALL ON FUNCTION force_release_lock(varchar) FROM PUBLIC;

-- Deletes lock rows and waiter places that expired (they block nobody, but accumulate when
-- processes die). Returns how many of each.
CREATE OR REPLACE FUNCTION pglock_gc()
RETURNS TABLE (expired_locks bigint, expired_waiters bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    WITH gone AS (DELETE FROM distributed_locks l WHERE l.expires_at <= v_now RETURNING 1)
    SELECT count(*) INTO expired_locks FROM gone;
    WITH gone AS (DELETE FROM distributed_lock_waiters w WHERE w.expires_at <= v_now RETURNING 1)
    SELECT count(*) INTO expired_waiters FROM gone;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_gc() FROM PUBLIC;

-- pglock_fence: verify_fence that also bounds the verifying transaction on the server. A fenced
-- transaction holds the lock row FOR SHARE until it ends; if its client stops talking (a frozen
-- VM, a silent partition), PostgreSQL keeps it open until TCP finds the connection dead, about
-- two hours by default, and no takeover of the lock can commit meanwhile. Bounding the
-- transaction's idle time and each statement to the lease's remaining time plus a grace ends
-- such a transaction, and its FOR SHARE, soon after the lease does.
--
-- Returns the lease's expiry when p_lock_name is held, unexpired, with p_fencing_token, and NULL
-- (changing nothing) otherwise. When held, the lock stays so until the calling transaction ends
-- (FOR SHARE, as in verify_fence), and for the rest of that transaction
-- idle_in_transaction_session_timeout and statement_timeout are at most the time left on the
-- lease plus p_grace_ms (as SET LOCAL would set them; a stricter value already in force stays).
-- Both timeouts restart with each statement: a session that goes quiet is ended, and a
-- statement canceled, once that long has passed since it began, so a transaction that fences,
-- writes and then stops talking is ended by the lease's expiry plus the grace; time it spends
-- working after the fence moves that point later by as much. SQLSTATE 22023 (COLUMN
-- p_grace_ms) for a grace that is NULL, negative or over 24 h.
CREATE OR REPLACE FUNCTION pglock_fence(p_lock_name varchar, p_fencing_token bigint, p_grace_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    PERFORM pglock_check_grace(p_grace_ms);
    SELECT l.expires_at INTO v_expires_at
      FROM distributed_locks l
     WHERE l.lock_name = p_lock_name
       AND l.fencing_token = p_fencing_token
       AND l.expires_at > clock_timestamp()
       FOR SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM pglock_bound_fenced(v_expires_at, p_grace_ms);
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_fence(varchar, bigint, bigint) FROM PUBLIC;

-- Bounds the calling transaction's idle_in_transaction_session_timeout and statement_timeout,
-- for its rest, to the time left until p_expires_at (a fenced lease's expiry) plus p_grace_ms,
-- as pglock_fence and pglock_job_fence do.
CREATE OR REPLACE FUNCTION pglock_bound_fenced(p_expires_at timestamptz, p_grace_ms bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_bound bigint;
    v_name  text;
    v_ms    bigint;
BEGIN
    -- Whole milliseconds, rounded up, and at least 1: 0 would mean no limit at all.
    v_bound := greatest(1, ceil(extract(epoch FROM p_expires_at - clock_timestamp()) * 1000)::bigint + p_grace_ms);
    -- Both in milliseconds, 0 for none: current_setting shows them with a unit that interval
    -- input reads ('30s', '1min'). A stricter limit (the caller's, or an earlier fence's in
    -- this transaction) is kept.
    FOREACH v_name IN ARRAY ARRAY['idle_in_transaction_session_timeout', 'statement_timeout'] LOOP
        v_ms := (extract(epoch FROM current_setting(v_name)::interval) * 1000)::bigint;
        IF v_ms = 0 OR v_ms > v_bound THEN
            PERFORM set_config(v_name, v_bound::text, true);
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pglock_bound_fenced(timestamptz, bigint) FROM PUBLIC;

-- Renews the locks p_holder_ids[i] holds on p_lock_names[i] for p_ttl_ms[i] from now, as
-- extend_lock_ms does one.
CREATE OR REPLACE FUNCTION pglock_renew_many(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
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

-- Keeps the places of many waiters in one statement: refreshes the place p_holder_ids[i] has in
-- the queue of p_lock_names[i] for p_ttl_ms[i] from now, and says what the lock is doing, so that
-- a waiter told of releases and handoffs (NOTIFY) needs no poll of its own until the lock's
-- lease could end. A row per element, in their order: outcome 'kept' (expires_at: the place's new
-- expiry) or 'gone' (no such place: the lock was handed to that waiter, or the place expired or
-- was left; poll with pglock_attempt), the lock's holder and expiry (NULLs when there is no
-- lock row: it is free, poll), and the database time the answer holds for.
CREATE OR REPLACE FUNCTION pglock_wait_many(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
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
