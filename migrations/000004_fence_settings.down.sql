-- Restores pglock_fence as 000002 made it.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

CREATE OR REPLACE FUNCTION pglock_fence(p_lock_name varchar, p_fencing_token bigint, p_grace_ms bigint)
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

COMMIT;
