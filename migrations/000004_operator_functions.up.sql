-- pglock SQL contract v4: what operators (pglockctl) do to locks they do not hold.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);
SELECT pglock_check_schema_is_safe();

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

REVOKE ALL ON FUNCTION force_release_lock(varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION pglock_gc() FROM PUBLIC;

COMMIT;
