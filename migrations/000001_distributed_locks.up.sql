-- pglock SQL contract v1: lease locks in a table, callable from any language.
--
-- Everything is created in the first existing schema of the migrating session's search_path
-- (current_schema(), usually public), or in pglock.schema, which pglock's migrator sets. The functions are SECURITY DEFINER and pin that schema,
-- with pg_temp last so that a caller's temporary objects can never shadow ours.
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
            USING ERRCODE = '42501',
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
    metadata      jsonb        NOT NULL DEFAULT '{}'
);

CREATE INDEX distributed_locks_expires_at_idx ON distributed_locks (expires_at);

COMMENT ON TABLE distributed_locks IS
    'pglock lease locks: one row per held (or expired, not yet reclaimed) lock. Write only through the pglock functions.';
COMMENT ON COLUMN distributed_locks.fencing_token IS
    'Strictly increasing per lock name across all holders ever; drawn after the row is ours.';

-- CACHE 1 matters: with per-session caching a later nextval() in one session could return a
-- smaller value than an earlier one in another, and tokens would no longer follow lock order.
-- Not OWNED BY the table, so recreating the table cannot reset the tokens it hands out.
CREATE SEQUENCE distributed_locks_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

-- Raises SQLSTATE 22023 for a lock name or holder id that no row could carry. The message starts
-- with the parameter's name, which is how the Go side tells the two apart.
CREATE FUNCTION pglock_check_name_and_holder(p_lock_name varchar, p_holder_id varchar)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_lock_name IS NULL OR p_lock_name = '' THEN
        RAISE EXCEPTION 'p_lock_name: must not be null or empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_lock_name) > 255 THEN
        RAISE EXCEPTION 'p_lock_name: % characters long, the limit is 255', length(p_lock_name)
            USING ERRCODE = '22023';
    END IF;
    IF p_holder_id IS NULL OR p_holder_id = '' THEN
        RAISE EXCEPTION 'p_holder_id: must not be null or empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_holder_id: % characters long, the limit is 255', length(p_holder_id)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Takes p_lock_name for p_holder_id for p_ttl_ms milliseconds of database time, if it is free,
-- expired, or already held by p_holder_id (which extends it and keeps its token). Always returns
-- one row: on success the caller's lock, otherwise the current holder's. Call it in a
-- transaction of its own: an attempt that loses a race to another acquirer locks the winner's
-- row until the caller's transaction ends.
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
#variable_conflict use_column
DECLARE
    v_lock distributed_locks;
    v_now  timestamptz;
BEGIN
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    IF p_ttl_ms IS NULL OR p_ttl_ms <= 0 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 1 to 86400000 milliseconds (24 h), got %',
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_metadata: must be a JSON object, got %', jsonb_typeof(p_metadata)
            USING ERRCODE = '22023';
    END IF;

    LOOP
        -- A plain read first: a lock held by someone else is answered without locking its row or
        -- taking a transaction id, so a failed attempt writes nothing and flushes no commit.
        SELECT * INTO v_lock FROM distributed_locks l WHERE l.lock_name = p_lock_name;
        IF FOUND AND v_lock.holder_id <> p_holder_id AND v_lock.expires_at > clock_timestamp() THEN
            RETURN QUERY SELECT false, v_lock.holder_id, v_lock.fencing_token,
                                v_lock.acquired_at, v_lock.expires_at, v_lock.metadata;
            RETURN;
        END IF;

        -- A new holder's token is drawn only once the row is ours (locked in ON CONFLICT, or
        -- inserted by us below), so tokens follow the order in which holders really held the name.
        v_now := clock_timestamp();
        INSERT INTO distributed_locks AS l
            (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata)
        VALUES (p_lock_name, p_holder_id, 0, v_now,
                v_now + p_ttl_ms * interval '1 millisecond', coalesce(p_metadata, '{}'))
        ON CONFLICT (lock_name) DO UPDATE
            SET holder_id     = excluded.holder_id,
                -- Only a live lease keeps its token: a holder that lets its lease lapse and
                -- takes the lock again gets a new one, so its writes from before are fenced off.
                fencing_token = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.fencing_token
                                     ELSE nextval('distributed_locks_fencing_token_seq') END,
                acquired_at   = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.acquired_at
                                     ELSE excluded.acquired_at END,
                expires_at    = excluded.expires_at,
                metadata      = excluded.metadata
            WHERE l.holder_id = excluded.holder_id OR l.expires_at <= clock_timestamp()
        RETURNING l.* INTO v_lock;

        IF FOUND THEN
            IF v_lock.fencing_token = 0 THEN -- inserted, not taken over: draw the token now
                UPDATE distributed_locks l
                   SET fencing_token = nextval('distributed_locks_fencing_token_seq')
                 WHERE l.lock_name = p_lock_name
                RETURNING l.* INTO v_lock;
            END IF;
            RETURN QUERY SELECT true, v_lock.holder_id, v_lock.fencing_token,
                                v_lock.acquired_at, v_lock.expires_at, v_lock.metadata;
            RETURN;
        END IF;
        -- Lost a race to another acquirer between the read and the upsert: read again, and if the
        -- winner has already released, try again.
    END LOOP;
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
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023';
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

-- Deletes the lock if p_holder_id holds it (expired or not: nobody else has taken it) and wakes
-- waiters with NOTIFY pglock_released, payload = the lock name, delivered at commit.
CREATE FUNCTION release_lock(p_lock_name varchar, p_holder_id varchar)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released boolean;
BEGIN
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);

    DELETE FROM distributed_locks l WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id;
    v_released := FOUND;
    IF v_released THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
    END IF;
    RETURN v_released;
END;
$$;

-- The seed contract, in seconds and booleans, for callers that want nothing more.
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
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023';
    END IF;
    RETURN (SELECT a.acquired
              FROM acquire_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a);
END;
$$;

CREATE FUNCTION extend_lock(p_lock_name varchar, p_holder_id varchar, p_ttl_seconds integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023';
    END IF;
    RETURN extend_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint) IS NOT NULL;
END;
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

COMMIT;
