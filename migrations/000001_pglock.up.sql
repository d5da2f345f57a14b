-- pglock's SQL contract: lease locks in a table with fencing tokens and a fair queue, names for
-- advisory locks, and what operators do, callable from any language. It reads top to bottom:
-- the safety check, the tables and the type, then each function once. Released migrations never
-- change (TestReleasedMigrationsNeverChange): later versions are files of their own.
--
-- Everything is created in the first existing schema of the migrating session's search_path
-- (current_schema(), usually public), or in pglock.schema, which pglock's migrator sets. The
-- functions are SECURITY DEFINER and pin that schema, with pg_temp last so that a caller's
-- temporary objects can never shadow ours.
--
-- Errors callers may act on carry a field the Go side reads, never the message, which may be
-- reworded or translated: SQLSTATE 22023 with COLUMN naming the argument at fault, and 42501
-- with CONSTRAINT 'pglock_schema_is_safe' for a schema every role may write.
BEGIN;

-- What runs as the migrating role names pg_catalog's objects and exact types: a role that may
-- create objects in the schema could otherwise define a closer match (format(text, name), an
-- operator =(oid, integer)) and run code as that role, often a superuser. Every file alike.
SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- SECURITY DEFINER functions are only as safe as the schema they resolve names in: a role that
-- may create objects there can shadow what they call (an exact-type length(varchar) beats
-- pg_catalog's length(text)) and run code as the owner. Refuse a schema every role may write.
CREATE FUNCTION pglock_check_schema_is_safe()
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n,
                      pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n'::"char", n.nspowner))) a
                WHERE n.nspname = pg_catalog.current_schema()
                  AND a.grantee = 0::pg_catalog.oid AND a.privilege_type = 'CREATE'::pg_catalog.text) THEN
        RAISE EXCEPTION 'pglock: every role may create objects in schema %, so they could hijack pglock''s SECURITY DEFINER functions', pg_catalog.current_schema()
            USING ERRCODE = '42501', CONSTRAINT = 'pglock_schema_is_safe', SCHEMA = pg_catalog.current_schema(),
                  HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC, or install pglock into a schema of its own.', pg_catalog.current_schema());
    END IF;
END;
$$;

SELECT pglock_check_schema_is_safe();

CREATE TABLE distributed_locks (
    lock_name     varchar(255) PRIMARY KEY,
    holder_id     varchar(255) NOT NULL,
    fencing_token bigint       NOT NULL,
    acquired_at   timestamptz  NOT NULL,
    expires_at    timestamptz  NOT NULL,
    metadata      jsonb        NOT NULL DEFAULT '{}',
    instance      varchar(255) NOT NULL DEFAULT ''
);

CREATE INDEX distributed_locks_expires_at_idx ON distributed_locks (expires_at);

COMMENT ON TABLE distributed_locks IS
    'pglock lease locks: one row per held (or expired, not yet reclaimed) lock. Write only through the pglock functions.';

COMMENT ON COLUMN distributed_locks.fencing_token IS
    'Strictly increasing per lock name across all holders ever; drawn after the row is ours.';

COMMENT ON COLUMN distributed_locks.instance IS
    'Which process holds the lock, as it describes itself (pglock: app@host:pid).';

-- CACHE 1 matters: with per-session caching a later nextval() in one session could return a
-- smaller value than an earlier one in another, and tokens would no longer follow lock order.
-- Not OWNED BY the table, so recreating the table cannot reset the tokens it hands out.
CREATE SEQUENCE distributed_locks_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

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

-- Opt-in: one row per name whose holders chose to register it.
CREATE TABLE advisory_lock_names (
    lock_key      bigint      PRIMARY KEY,
    namespace     text        NOT NULL DEFAULT '',
    name          text        NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE advisory_lock_names IS
    'pglock: the names behind advisory lock keys, registered by their holders. Write only through register_advisory_name.';

CREATE TYPE pglock_acquisition AS (
    acquired      boolean,
    queued        boolean,
    holder_id     varchar,
    instance      varchar,
    fencing_token bigint,
    acquired_at   timestamptz,
    expires_at    timestamptz,
    metadata      jsonb,
    checked_at    timestamptz
);

COMMENT ON TYPE pglock_acquisition IS
    'The answer of pglock_attempt: the caller''s lock when acquired, else who holds it or is first in line.';

-- Raises SQLSTATE 22023, with COLUMN naming the argument, for a lock name or holder id that no
-- row could carry.
CREATE FUNCTION pglock_check_name_and_holder(p_lock_name varchar, p_holder_id varchar)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_lock_name IS NULL OR p_lock_name = '' THEN
        RAISE EXCEPTION 'p_lock_name: must not be null or empty' USING ERRCODE = '22023', COLUMN = 'p_lock_name';
    END IF;
    IF length(p_lock_name) > 255 THEN
        RAISE EXCEPTION 'p_lock_name: % characters long, the limit is 255', length(p_lock_name)
            USING ERRCODE = '22023', COLUMN = 'p_lock_name';
    END IF;
    IF p_holder_id IS NULL OR p_holder_id = '' THEN
        RAISE EXCEPTION 'p_holder_id: must not be null or empty' USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
    IF length(p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_holder_id: % characters long, the limit is 255', length(p_holder_id)
            USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
END;
$$;

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
CREATE FUNCTION pglock_attempt(
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
    IF p_ttl_ms IS NULL OR p_ttl_ms <= 0 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 1 to 86400000 milliseconds (24 h), got %',
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_ttl_ms';
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
BEGIN
    RETURN QUERY
        SELECT a.* FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_ms, p_metadata, p_instance, p_wait) a;
END;
$$;

-- The one release. If p_holder_id holds the lock, hands it to the first live waiter (a new
-- token, its own TTL from now; NOTIFY pglock_handoff with a JSON payload naming it) or, with
-- nobody waiting, deletes it (NOTIFY pglock_released, payload = the lock name). Either way it
-- removes p_holder_id's own place in the queue, so a waiter that gives up calls it too; and a
-- lock handed to the caller while it ran is released as well.
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

-- The seed contract: the functions callers of the original skill already use, with their
-- signatures and results, now through the queue. The acquires never queue; release_lock hands
-- off. Each calls the core directly, in plpgsql, which keeps its plans from call to call (an
-- SQL-language SECURITY DEFINER function is planned at every call). acquire_lock_ms takes
-- p_lock_name for p_holder_id for p_ttl_ms milliseconds of database time, if it is free,
-- expired, or already held by p_holder_id (which extends it and keeps its token), and returns
-- one row: on success the caller's lock, otherwise the current holder's.
CREATE FUNCTION acquire_lock_ms(
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

-- acquire_lock_ms in seconds, answering only whether the lock was taken.
CREATE FUNCTION acquire_lock(
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
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_ttl_seconds';
    END IF;
    SELECT a.acquired INTO v_acquired
      FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a;
    RETURN v_acquired;
END;
$$;

-- Moves the expiry of a lock p_holder_id holds (and that has not expired) to p_ttl_ms from now.
-- Returns the new expires_at, or NULL when the lock is not held by p_holder_id.
CREATE FUNCTION extend_lock_ms(p_lock_name varchar, p_holder_id varchar, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    IF p_ttl_ms IS NULL OR p_ttl_ms <= 0 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 1 to 86400000 milliseconds (24 h), got %',
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_ttl_ms';
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

-- extend_lock_ms in seconds: true while the lock is the caller's.
CREATE FUNCTION extend_lock(p_lock_name varchar, p_holder_id varchar, p_ttl_seconds integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_ttl_seconds';
    END IF;
    RETURN extend_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint) IS NOT NULL;
END;
$$;

-- pglock_release, answering only whether the caller held the lock.
CREATE FUNCTION release_lock(p_lock_name varchar, p_holder_id varchar)
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

-- Releases p_lock_name whoever holds it, exactly as its holder's release would: the next live
-- waiter gets it (with a higher token) or waiters are told it is free. Returns the holder it
-- took the lock from; no row when the lock was not held.
CREATE FUNCTION force_release_lock(p_lock_name varchar)
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

-- Deletes lock rows and waiter places that expired (they block nobody, but accumulate when
-- processes die). Returns how many of each.
CREATE FUNCTION pglock_gc()
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

-- The key of a name, as the Go package computes it: the first 8 bytes of the SHA-256 of the
-- name (or of namespace, NUL, name), read as a big-endian bigint. A body in this form binds
-- what it calls now, as the migrating role resolves it, so every name is pg_catalog's.
CREATE FUNCTION pglock_advisory_key(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
           CASE WHEN p_namespace OPERATOR(pg_catalog.=) ''::pg_catalog.text
                THEN pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name)
                ELSE pg_catalog.convert_to(p_namespace, 'UTF8'::pg_catalog.name)
                     OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                     OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name) END
       ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8;

-- Records the name behind its key, once; returns the key.
CREATE FUNCTION register_advisory_name(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint;
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 255 THEN
        RAISE EXCEPTION 'p_name: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_name';
    END IF;
    v_key := pglock_advisory_key(p_name, coalesce(p_namespace, ''));
    INSERT INTO advisory_lock_names (lock_key, namespace, name)
    VALUES (v_key, coalesce(p_namespace, ''), p_name)
    ON CONFLICT (lock_key) DO NOTHING;
    RETURN v_key;
END;
$$;

-- Every advisory lock held or awaited in this database: its key (one bigint, or two ints when
-- pair), its registered name if any, the mode, whether it is granted or since when it is
-- awaited, the backend (pid, application, client address, session start) and the pids that
-- block a waiter. It runs with the caller's rights: seeing other roles' sessions takes
-- pg_read_all_stats.
CREATE FUNCTION advisory_locks()
RETURNS TABLE (
    lock_key         bigint,
    pair             boolean,
    pair_namespace   integer,
    pair_id          integer,
    namespace        text,
    name             text,
    mode             text,
    granted          boolean,
    waiting_since    timestamptz,
    pid              integer,
    application_name text,
    client_addr      inet,
    backend_start    timestamptz,
    blocked_by       integer[]
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN l.objsubid = 1 THEN (l.classid::bigint << 32) | l.objid::bigint END,
           l.objsubid = 2,
           CASE WHEN l.objsubid = 2 THEN (l.classid::bigint - CASE WHEN l.classid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           CASE WHEN l.objsubid = 2 THEN (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           n.namespace,
           n.name,
           CASE l.mode WHEN 'ExclusiveLock' THEN 'exclusive' WHEN 'ShareLock' THEN 'shared' ELSE l.mode END,
           l.granted,
           l.waitstart,
           l.pid,
           a.application_name,
           a.client_addr,
           a.backend_start,
           CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid) ELSE '{}' END
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      LEFT JOIN advisory_lock_names n
             ON l.objsubid = 1 AND n.lock_key = (l.classid::bigint << 32) | l.objid::bigint
     WHERE l.locktype = 'advisory'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
     ORDER BY l.granted DESC, l.pid, l.objsubid, l.classid, l.objid, l.mode;
$$;

-- Whether the calling session holds an advisory lock, in the given mode: a bigint key
-- (p_key), or with p_pair the two ints (p_ns, p_id). pg_locks shows a bigint key as its high
-- and low 32 bits (objsubid 1), a pair as its two ints (objsubid 2), all as unsigned oids.
CREATE FUNCTION pglock_session_holds_advisory(p_pair boolean, p_shared boolean, p_ns integer,
                                              p_id integer, p_key bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks l
         WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND l.mode = CASE WHEN p_shared THEN 'ShareLock' ELSE 'ExclusiveLock' END
           AND CASE WHEN p_pair
                    THEN l.objsubid = 2
                         AND l.classid::bigint = (p_ns::bigint & 4294967295)
                         AND l.objid::bigint = (p_id::bigint & 4294967295)
                    ELSE l.objsubid = 1
                         AND l.classid::bigint = ((p_key >> 32) & 4294967295)
                         AND l.objid::bigint = (p_key & 4294967295)
               END);
$$;

-- SECURITY DEFINER functions run with the owner's rights: nobody may call them until granted.
-- Grant EXECUTE on the public functions (and SELECT on the table) to the application's role.
REVOKE ALL ON FUNCTION pglock_check_schema_is_safe() FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_check_name_and_holder(varchar, varchar) FROM PUBLIC;

REVOKE ALL ON FUNCTION acquire_lock_ms(varchar, varchar, bigint, jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION extend_lock_ms(varchar, varchar, bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION release_lock(varchar, varchar) FROM PUBLIC;

REVOKE ALL ON FUNCTION acquire_lock(varchar, varchar, integer, jsonb) FROM PUBLIC;

REVOKE ALL ON FUNCTION extend_lock(varchar, varchar, integer) FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_release(varchar, varchar) FROM PUBLIC;

REVOKE ALL ON FUNCTION verify_fence(varchar, bigint) FROM PUBLIC;

REVOKE ALL ON FUNCTION register_advisory_name(text, text) FROM PUBLIC;

REVOKE ALL ON FUNCTION force_release_lock(varchar) FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_gc() FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

COMMIT;
