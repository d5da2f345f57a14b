-- A holder can give a lock up no earlier than a given time after it took it, by the database's
-- clock (ShedLock's lockAtLeastFor): a job run by several instances on one interval, each with
-- its own clock and start offset, then runs once per interval, for the instance that took the
-- lock keeps it until the others' ticks of that interval have passed, even when its run ends at
-- once, and even when its process dies after.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- Releases p_lock_name as pglock_release does if p_holder_id has held it for p_held_ms since
-- it took it; otherwise moves its lease's end to that moment (sooner or later than it was) and
-- answers it: nobody can take the lock before, and the first acquirer after takes it (no
-- handoff). The row's holder becomes 'pglock.held:' and the md5 of p_holder_id, so that no
-- renewal of p_holder_id's, one in flight included, moves the end again; a second call (a retry
-- after a lost answer) answers the same. The caller's own place in the queue, if a poll of its
-- own left one, goes, as pglock_release removes it. Returns (released, handed_off, expires_at):
-- released is false when p_holder_id did not hold the lock; expires_at is the lease's new end
-- when the release was put off, else NULL. p_held_ms must be positive (22023, COLUMN p_held_ms).
CREATE FUNCTION pglock_release_after(p_lock_name varchar, p_holder_id varchar, p_held_ms bigint)
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

COMMIT;
