-- Semaphores: n holders of one name, each a row of distributed_locks.

-- Takes one of p_permits places of semaphore p_name for p_holder_id, if fewer than p_permits
-- are held and no live waiter queued ahead of the caller would be left out; with p_wait, a
-- caller that cannot have one takes (or keeps) a place in the queue. Changing p_permits
-- applies from the next attempt on; holders keep their places. Attempts on one name are
-- serialized by a transaction-level advisory lock, held for the statement; expired places are
-- deleted first, waiting for a renewal or a fenced transaction that holds one. Names have no
-- '/'. Only READ COMMITTED transactions may call it (SQLSTATE 0A000 otherwise). Returns acquired
-- (and then lock_name, the holder's row, its fencing_token and expires_at), queued (this call
-- wrote the caller's place), and holders, the live holders counted. SQLSTATE 22023 with COLUMN
-- for a name whose holder rows' names would be over 255 characters, permits under 1, or a TTL
-- out of range.
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
