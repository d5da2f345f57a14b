-- Back to contract v1: v1's own bodies of acquire_lock_ms, acquire_lock and release_lock (as
-- 000001 created them), then every object 000002 added.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

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
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023';
    END IF;
    RETURN (SELECT a.acquired
              FROM acquire_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a);
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
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);

    DELETE FROM distributed_locks l WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id;
    v_released := FOUND;
    IF v_released THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
    END IF;
    RETURN v_released;
END;
$$;

DROP FUNCTION verify_fence(varchar, bigint);
DROP FUNCTION pglock_release(varchar, varchar);
DROP FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean);
DROP TABLE distributed_lock_waiters;
ALTER TABLE distributed_locks DROP COLUMN instance;

COMMIT;
