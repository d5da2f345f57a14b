-- pglock_fence: verify_fence that also bounds the verifying transaction on the server. A fenced
-- transaction holds the lock row FOR SHARE until it ends; if its client stops talking (a frozen
-- VM, a silent partition), PostgreSQL keeps it open until TCP finds the connection dead, about
-- two hours by default, and no takeover of the lock can commit meanwhile. Bounding the
-- transaction's idle time and each statement to the lease's remaining time plus a grace ends
-- such a transaction, and its FOR SHARE, soon after the lease does.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);
SELECT pglock_check_schema_is_safe();

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
CREATE FUNCTION pglock_fence(p_lock_name varchar, p_fencing_token bigint, p_grace_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
    v_bound      bigint;
    v_setting    record;
BEGIN
    IF p_grace_ms IS NULL OR p_grace_ms < 0 OR p_grace_ms > 86400000 THEN
        RAISE EXCEPTION 'p_grace_ms: must be from 0 to 86400000 milliseconds (24 h), got %',
            coalesce(p_grace_ms::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_grace_ms';
    END IF;
    SELECT l.expires_at INTO v_expires_at
      FROM distributed_locks l
     WHERE l.lock_name = p_lock_name
       AND l.fencing_token = p_fencing_token
       AND l.expires_at > clock_timestamp()
       FOR SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Whole milliseconds, rounded up, and at least 1: 0 would mean no limit at all.
    v_bound := greatest(1, ceil(extract(epoch FROM v_expires_at - clock_timestamp()) * 1000)::bigint + p_grace_ms);
    -- pg_settings gives both in milliseconds, 0 for none; a stricter limit (the caller's, or
    -- an earlier fence's in this transaction) is kept.
    FOR v_setting IN
        SELECT s.name, s.setting::bigint AS ms FROM pg_catalog.pg_settings s
         WHERE s.name IN ('idle_in_transaction_session_timeout', 'statement_timeout')
    LOOP
        IF v_setting.ms = 0 OR v_setting.ms > v_bound THEN
            PERFORM set_config(v_setting.name, v_bound::text, true);
        END IF;
    END LOOP;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_fence(varchar, bigint, bigint) FROM PUBLIC;

COMMIT;
