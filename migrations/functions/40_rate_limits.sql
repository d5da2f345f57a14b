-- Rate limits: GCRA in one row per key.

-- Takes p_cost events for p_rate_key, allowing p_burst at once and one every
-- p_interval_us microseconds: allowed with wait_us 0 when they fit now; allowed with wait_us
-- > 0, reserved, when they fit within p_max_wait_us (the caller waits that long, then goes
-- ahead); otherwise not allowed, changing nothing, with wait_us saying how long until they
-- would fit. remaining is how many more would fit now, after this. A key whose tat has passed
-- is as a new one; about one call in a hundred deletes up to 100 such keys, so the table keeps
-- only keys in use. SQLSTATE 22023, COLUMN naming the argument, for a key of 0 or over 255
-- characters, a non-positive interval, a burst under 1, a cost under 1 or over the burst, or
-- a negative wait.
CREATE OR REPLACE FUNCTION pglock_rate_take(p_durable boolean, p_rate_key varchar, p_interval_us bigint, p_burst integer,
                                 p_cost integer, p_max_wait_us bigint)
RETURNS TABLE (allowed boolean, wait_us bigint, remaining integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      timestamptz;
    v_interval interval;
    v_capacity interval;
    v_tat      timestamptz;
    v_new_tat  timestamptz;
    v_wait     interval;
BEGIN
    IF p_durable IS NULL THEN
        RAISE EXCEPTION 'p_durable: must not be null' USING ERRCODE = '22023', COLUMN = 'p_durable';
    ELSIF p_rate_key IS NULL OR p_rate_key = '' OR length(p_rate_key) > 255 THEN
        RAISE EXCEPTION 'p_rate_key: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_rate_key';
    ELSIF p_interval_us IS NULL OR p_interval_us < 1 THEN
        RAISE EXCEPTION 'p_interval_us: must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_interval_us';
    ELSIF p_burst IS NULL OR p_burst < 1 THEN
        RAISE EXCEPTION 'p_burst: must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_burst';
    ELSIF p_cost IS NULL OR p_cost < 1 OR p_cost > p_burst THEN
        RAISE EXCEPTION 'p_cost: must be from 1 to the burst (%)', p_burst USING ERRCODE = '22023', COLUMN = 'p_cost';
    ELSIF p_max_wait_us IS NULL OR p_max_wait_us < 0 THEN
        RAISE EXCEPTION 'p_max_wait_us: must not be negative' USING ERRCODE = '22023', COLUMN = 'p_max_wait_us';
    END IF;
    v_interval := p_interval_us * interval '1 microsecond';
    v_capacity := p_burst * v_interval;

    -- One statement decides and records: the row lock orders every instance's decisions on a
    -- key, each on the clock of when it holds the lock. A new key fits (the cost is at most the
    -- burst); a refused take writes nothing.
    INSERT INTO pglock_rate_limits AS r (durable, rate_key, tat)
    VALUES (p_durable, p_rate_key, clock_timestamp() + p_cost * v_interval)
    ON CONFLICT (durable, rate_key) DO UPDATE
       SET tat = greatest(r.tat, clock_timestamp()) + p_cost * v_interval
     WHERE greatest(r.tat, clock_timestamp()) + p_cost * v_interval - v_capacity - clock_timestamp()
           <= p_max_wait_us * interval '1 microsecond'
    RETURNING r.tat INTO v_new_tat;
    allowed := FOUND;
    v_now := clock_timestamp();
    IF allowed THEN
        v_tat := v_new_tat;
    ELSE
        SELECT r.tat INTO v_tat FROM pglock_rate_limits r WHERE r.durable = p_durable AND r.rate_key = p_rate_key;
        v_new_tat := greatest(v_tat, v_now) + p_cost * v_interval;
    END IF;
    -- A refusal says at least 1 µs: its decision was taken a moment before v_now.
    v_wait := greatest(v_new_tat - v_capacity - v_now, CASE WHEN allowed THEN interval '0' ELSE interval '1 microsecond' END);
    wait_us := ceil(extract(epoch FROM v_wait) * 1000000)::bigint;
    remaining := greatest(0, floor(extract(epoch FROM (v_now + v_capacity - greatest(v_tat, v_now))) * 1000000 / p_interval_us))::integer;

    IF random() < 0.01 THEN
        DELETE FROM pglock_rate_limits r
         WHERE (r.durable, r.rate_key) IN (
                SELECT e.durable, e.rate_key FROM pglock_rate_limits e
                 WHERE e.durable = p_durable AND e.tat < v_now
                 ORDER BY e.tat LIMIT 100
                   FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_take(boolean, varchar, bigint, integer, integer, bigint) FROM PUBLIC;
