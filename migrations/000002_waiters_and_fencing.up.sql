-- pglock SQL contract v2: who holds a lock, a fair queue of waiters with direct handoff on
-- release, and a fencing check for the holder's own transactions. v1's functions keep their
-- signatures and now go through the queue.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);
SELECT pglock_check_schema_is_safe();

ALTER TABLE distributed_locks ADD COLUMN instance varchar(255) NOT NULL DEFAULT '';
COMMENT ON COLUMN distributed_locks.instance IS
    'Which process holds the lock, as it describes itself (pglock: app@host:pid).';

-- Waiters queue per lock name in waiter_seq order. A row lives while its waiter refreshes it;
-- an expired row is passed over.
CREATE TABLE distributed_lock_waiters (
    lock_name   varchar(255) NOT NULL,
    holder_id   varchar(255) NOT NULL,
    waiter_seq  bigint       GENERATED ALWAYS AS IDENTITY,
    instance    varchar(255) NOT NULL DEFAULT '',
    ttl_ms      bigint       NOT NULL,
    metadata    jsonb        NOT NULL DEFAULT '{}',
    enqueued_at timestamptz  NOT NULL,
    expires_at  timestamptz  NOT NULL,
    PRIMARY KEY (lock_name, holder_id)
);

CREATE INDEX distributed_lock_waiters_queue_idx ON distributed_lock_waiters (lock_name, waiter_seq);

COMMENT ON TABLE distributed_lock_waiters IS
    'pglock waiters: release_lock hands a lock to the first live waiter. Write only through the pglock functions.';

-- The one acquire. Takes p_lock_name for p_holder_id if it is free or expired and nobody is
-- queued ahead, or if p_holder_id holds it already (which extends it and keeps its token).
-- Otherwise, with p_wait, queues p_holder_id (or refreshes its place). Always returns one row:
-- the caller's lock when acquired, else the current holder's, or the reservation of the waiter
-- a free lock is kept for; queued says whether this call wrote the caller's place in the
-- queue, and checked_at is the database time the answer holds for. Like v1's acquire, call it
-- in a transaction of its own.
CREATE FUNCTION pglock_acquire(
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
#variable_conflict use_column
DECLARE
    v_lock   distributed_locks;
    v_waiter distributed_lock_waiters;
    v_ttl    interval;
    v_now    timestamptz;
    v_fresh  boolean;
    v_last_token bigint;
BEGIN
    -- Checked as plain expressions, which cost next to nothing; the helper that says exactly
    -- what is wrong runs only when something is.
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    IF p_ttl_ms IS NULL OR p_ttl_ms <= 0 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 1 to 86400000 milliseconds (24 h), got %',
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_metadata: must be a JSON object, got %', jsonb_typeof(p_metadata)
            USING ERRCODE = '22023';
    END IF;
    IF length(p_instance) > 255 THEN
        RAISE EXCEPTION 'p_instance: % characters long, the limit is 255', length(p_instance)
            USING ERRCODE = '22023';
    END IF;
    v_ttl := p_ttl_ms * interval '1 millisecond';
    queued := false;

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
                    queued := true;
                END IF;
            END IF;
            acquired := false;
            EXIT;
        END IF;

        INSERT INTO distributed_locks AS l
            (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
        VALUES (p_lock_name, p_holder_id, nextval('distributed_locks_fencing_token_seq'), v_now,
                v_now + v_ttl, coalesce(p_metadata, '{}'), coalesce(p_instance, ''))
        ON CONFLICT (lock_name) DO UPDATE
            SET holder_id     = excluded.holder_id,
                -- A takeover draws its token here, with the row locked. Only a live lease
                -- keeps its token: a holder that lets its lease lapse and takes the lock again
                -- gets a new one, so its writes from before are fenced off.
                fencing_token = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.fencing_token
                                     ELSE nextval('distributed_locks_fencing_token_seq') END,
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
                   SET fencing_token = nextval('distributed_locks_fencing_token_seq')
                 WHERE l.lock_name = p_lock_name
                RETURNING l.* INTO v_lock;
            END IF;
            IF p_wait THEN
                DELETE FROM distributed_lock_waiters w
                 WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
            END IF;
            acquired := true;
            EXIT;
        END IF;
        -- Lost a race between the read and the upsert: read again.
    END LOOP;

    holder_id := v_lock.holder_id;
    instance := v_lock.instance;
    fencing_token := v_lock.fencing_token;
    acquired_at := v_lock.acquired_at;
    expires_at := v_lock.expires_at;
    metadata := v_lock.metadata;
    checked_at := v_now;
    RETURN NEXT;
END;
$$;

-- The one release. If p_holder_id holds the lock, hands it to the first live waiter (a new
-- token, its own TTL from now; NOTIFY pglock_handoff with a JSON payload naming it) or, with
-- nobody waiting, deletes it (NOTIFY pglock_released, payload = the lock name). Either way it
-- removes p_holder_id's own place in the queue, so a waiter that gives up calls it too.
CREATE FUNCTION pglock_release(p_lock_name varchar, p_holder_id varchar)
RETURNS TABLE (released boolean, handed_off boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_lock   distributed_locks;
    v_waiter distributed_lock_waiters;
    v_now    timestamptz;
BEGIN
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    released := false;
    handed_off := false;

    -- The lock row first, waiter rows after and only with SKIP LOCKED: an acquirer locks them
    -- in the same order, so the two cannot deadlock.
    DELETE FROM distributed_locks l
     WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
    RETURNING l.* INTO v_lock;
    IF NOT FOUND THEN
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
        RETURN NEXT;
        RETURN;
    END IF;
    released := true;

    -- In one statement: forget the releaser's own place in the queue (a poll of its own can have
    -- written one just as a release handed it the lock), and take the first live waiter's place,
    -- skipping places a poll has locked. Places that expired are passed over (pglockctl gc
    -- removes them).
    v_now := clock_timestamp();
    IF NOT EXISTS (SELECT FROM distributed_lock_waiters w WHERE w.lock_name = p_lock_name) THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    WITH own_place AS (
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id
    ), first_live AS (
        SELECT w.holder_id FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id <> p_holder_id AND w.expires_at > v_now
         ORDER BY w.waiter_seq LIMIT 1
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM distributed_lock_waiters w
     USING first_live f
     WHERE w.lock_name = p_lock_name AND w.holder_id = f.holder_id
    RETURNING w.* INTO v_waiter;
    IF NOT FOUND THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    handed_off := true;

    -- The name is ours until commit (we deleted its row), so drawing the token here keeps
    -- tokens in holding order. The lease starts now, after the waiter's last write of its
    -- place, from which the waiter counts it.
    v_now := clock_timestamp();
    INSERT INTO distributed_locks AS l
        (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
    VALUES (p_lock_name, v_waiter.holder_id, nextval('distributed_locks_fencing_token_seq'), v_now,
            v_now + v_waiter.ttl_ms * interval '1 millisecond', v_waiter.metadata, v_waiter.instance)
    RETURNING l.* INTO v_lock;
    PERFORM pg_notify('pglock_handoff', json_build_object(
        'lock_name', v_lock.lock_name, 'holder_id', v_lock.holder_id,
        'fencing_token', v_lock.fencing_token, 'expires_at', v_lock.expires_at)::text);
    RETURN NEXT;
END;
$$;

-- True if p_lock_name is held, unexpired, with p_fencing_token; it then stays so until the
-- calling transaction ends (FOR SHARE on the lock row: no release, extension, handoff or
-- takeover can commit before it). SECURITY DEFINER, so a role with only SELECT may call it.
CREATE FUNCTION verify_fence(p_lock_name varchar, p_fencing_token bigint)
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

-- v1's functions, now through the queue: acquire_lock_ms and acquire_lock never queue,
-- release_lock hands off. Each calls the core directly, in plpgsql, which keeps its plans from
-- call to call (an SQL-language SECURITY DEFINER function is planned at every call).
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
          FROM pglock_acquire(p_lock_name, p_holder_id, p_ttl_ms, p_metadata) a;
END;
$$;

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
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023';
    END IF;
    SELECT a.acquired INTO v_acquired
      FROM pglock_acquire(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a;
    RETURN v_acquired;
END;
$$;

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

REVOKE ALL ON FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_release(varchar, varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION verify_fence(varchar, bigint) FROM PUBLIC;

COMMIT;
