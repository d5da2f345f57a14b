-- Back to contract v5: 000002's text of pglock_release.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

CREATE OR REPLACE FUNCTION pglock_release(p_lock_name varchar, p_holder_id varchar)
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

COMMIT;
