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
    -- One condition on the way through; the checks that name the argument only when it fails.
    IF coalesce(p_rate_key = '' OR length(p_rate_key) > 255 OR p_interval_us < 1 OR p_burst < 1 OR p_cost < 1
                OR p_cost > p_burst OR p_durable IS NULL, true) THEN
        PERFORM pglock_rate_check(p_durable, p_rate_key, p_interval_us, p_burst, p_cost);
    END IF;
    IF p_max_wait_us IS NULL OR p_max_wait_us < 0 THEN
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
    remaining := pglock_rate_remaining(v_tat, v_now, p_interval_us, p_burst);

    IF random() < 0.01 THEN
        PERFORM pglock_rate_collect(p_durable, v_now);
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_take(boolean, varchar, bigint, integer, integer, bigint) FROM PUBLIC;

-- Takes p_costs[i] events for each key p_keys[i] (of its limit: one every p_interval_us[i]
-- microseconds, p_bursts[i] at once), all or none, as pglock_rate_take takes one: allowed with
-- wait_us 0 when every key fits now; allowed with wait_us > 0, every key reserved for the same
-- moment, when they all fit within p_max_wait_us; otherwise not allowed, with wait_us saying how
-- long until they all would, and nothing counted. remaining is the smallest of the keys' after
-- this. The keys' rows are locked in key order, so that two decisions sharing keys never
-- deadlock (a key seen for the first time gets its row, as fresh as a new key, even when refused:
-- the cleanup deletes it as any other).
-- SQLSTATE 22023, COLUMN naming the argument, for arrays of different lengths, none or over 100
-- keys, a key twice, and any element pglock_rate_take would refuse.
CREATE OR REPLACE FUNCTION pglock_rate_take_many(p_durable boolean, p_keys varchar[], p_interval_us bigint[],
                                                 p_bursts integer[], p_costs integer[], p_max_wait_us bigint)
RETURNS TABLE (allowed boolean, wait_us bigint, remaining integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now    timestamptz;
    v_at     timestamptz;
    v_ok     boolean;
BEGIN
    -- Plain expressions on the way through, which cost next to nothing (a query would cost an
    -- executor's start); the checks that name the argument only when one fails.
    v_ok := coalesce(cardinality(p_keys) BETWEEN 1 AND 100 AND cardinality(p_interval_us) = cardinality(p_keys)
                     AND cardinality(p_bursts) = cardinality(p_keys) AND cardinality(p_costs) = cardinality(p_keys)
                     AND p_durable IS NOT NULL AND p_max_wait_us >= 0, false);
    IF v_ok THEN
        FOR i IN 1 .. cardinality(p_keys) LOOP
            v_ok := coalesce(p_keys[i] <> '' AND length(p_keys[i]) <= 255 AND p_interval_us[i] >= 1 AND p_bursts[i] >= 1
                             AND p_costs[i] BETWEEN 1 AND p_bursts[i] AND p_keys[i] <> ALL (p_keys[1:i - 1]), false);
            EXIT WHEN NOT v_ok;
        END LOOP;
    END IF;
    IF NOT v_ok THEN
        PERFORM pglock_rate_check_many(p_durable, p_keys, p_interval_us, p_bursts, p_costs, p_max_wait_us);
    END IF;

    -- Every key's row, locked, in key order, in one statement: a key's row is made (its time now,
    -- as a new key's) or, if it exists, locked and left as it is (DO UPDATE whose WHERE is false
    -- locks the row); a row deleted meanwhile (a cleanup, a Reset) is made again.
    INSERT INTO pglock_rate_limits AS r (durable, rate_key, tat)
    SELECT p_durable, k, clock_timestamp() FROM unnest(p_keys) AS k ORDER BY k
    ON CONFLICT (durable, rate_key) DO UPDATE SET tat = r.tat WHERE false;
    v_now := clock_timestamp();
    -- Then, in one statement: the moment they all fit (each key's own, the latest; now at the
    -- earliest), what fits now, and, if that moment is within the wait allowed, each key taken.
    WITH keyed AS (
        SELECT r.rate_key, r.tat, t.i, t.b, t.c
          FROM unnest(p_keys, p_interval_us, p_bursts, p_costs) AS t(k, i, b, c)
          JOIN pglock_rate_limits r ON r.durable = p_durable AND r.rate_key = t.k
    ), decided AS (
        SELECT greatest(max(greatest(k.tat, v_now) + (k.c - k.b) * k.i * interval '1 microsecond'), v_now) AS at,
               min(pglock_rate_remaining(k.tat, v_now, k.i, k.b)) AS left_now
          FROM keyed k
    ), taken AS (
        UPDATE pglock_rate_limits r
           SET tat = greatest(r.tat, d.at) + k.c * k.i * interval '1 microsecond'
          FROM keyed k, decided d
         WHERE r.durable = p_durable AND r.rate_key = k.rate_key
           AND extract(epoch FROM d.at - v_now) * 1000000 <= p_max_wait_us
        RETURNING pglock_rate_remaining(r.tat, v_now, k.i, k.b) AS left_after)
    SELECT d.at, coalesce((SELECT min(x.left_after) FROM taken x), d.left_now), EXISTS (SELECT FROM taken)
      INTO v_at, remaining, allowed
      FROM decided d;
    IF allowed THEN
        wait_us := ceil(extract(epoch FROM v_at - v_now) * 1000000)::bigint;
    ELSE
        wait_us := greatest(1, ceil(extract(epoch FROM v_at - v_now) * 1000000))::bigint;
    END IF;
    -- About one decision in a hundred deletes up to 100 keys as fresh as new ones, as
    -- pglock_rate_take does.
    IF random() < 0.01 THEN
        PERFORM pglock_rate_collect(p_durable, v_now);
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_take_many(boolean, varchar[], bigint[], integer[], integer[], bigint) FROM PUBLIC;

-- Gives back p_cost events of p_rate_key under its limit (one every p_interval_us microseconds,
-- p_burst at once), counted by a take whose real cost turned out lower: the key's time moves back
-- by that much, never before now (a key cannot hold more than its burst). Returns how many events
-- fit now after it: the whole burst for an unknown key (as fresh as a new one: nothing to give
-- back).
-- SQLSTATE 22023 as pglock_rate_take's for its arguments.
CREATE OR REPLACE FUNCTION pglock_rate_refund(p_durable boolean, p_rate_key varchar, p_interval_us bigint, p_burst integer,
                                              p_cost integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_tat timestamptz;
    v_now timestamptz;
BEGIN
    PERFORM pglock_rate_check(p_durable, p_rate_key, p_interval_us, p_burst, p_cost);
    UPDATE pglock_rate_limits r
       SET tat = greatest(r.tat - p_cost * p_interval_us * interval '1 microsecond', clock_timestamp())
     WHERE r.durable = p_durable AND r.rate_key = p_rate_key AND r.tat > clock_timestamp()
    RETURNING r.tat, clock_timestamp() INTO v_tat, v_now;
    v_now := coalesce(v_now, clock_timestamp());
    RETURN pglock_rate_remaining(coalesce(v_tat, v_now), v_now, p_interval_us, p_burst);
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_refund(boolean, varchar, bigint, integer, integer) FROM PUBLIC;

-- How many events of p_rate_key fit now under its limit, and how long until one more would
-- (0 when one fits), without taking any; a plain read.
CREATE OR REPLACE FUNCTION pglock_rate_peek(p_durable boolean, p_rate_key varchar, p_interval_us bigint, p_burst integer)
RETURNS TABLE (remaining integer, wait_us bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := clock_timestamp();
    v_tat timestamptz;
BEGIN
    PERFORM pglock_rate_check(p_durable, p_rate_key, p_interval_us, p_burst, 1);
    SELECT greatest(r.tat, v_now) INTO v_tat FROM pglock_rate_limits r WHERE r.durable = p_durable AND r.rate_key = p_rate_key;
    v_tat := coalesce(v_tat, v_now);
    remaining := pglock_rate_remaining(v_tat, v_now, p_interval_us, p_burst);
    wait_us := greatest(0, ceil(extract(epoch FROM v_tat + (p_interval_us - p_burst * p_interval_us) * interval '1 microsecond' - v_now)
                                * 1000000))::bigint;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_peek(boolean, varchar, bigint, integer) FROM PUBLIC;

-- Forgets p_rate_key: its next event finds it as a new key. Returns whether it was known.
CREATE OR REPLACE FUNCTION pglock_rate_reset(p_durable boolean, p_rate_key varchar)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_rate_check(p_durable, p_rate_key, 1, 1, 1);
    DELETE FROM pglock_rate_limits r WHERE r.durable = p_durable AND r.rate_key = p_rate_key;
    RETURN FOUND;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_reset(boolean, varchar) FROM PUBLIC;

-- How many events fit at once at p_now in a key whose time is p_tat. STABLE, as
-- timestamptz + interval is: inlined where it is called.
CREATE OR REPLACE FUNCTION pglock_rate_remaining(p_tat timestamptz, p_now timestamptz, p_interval_us bigint, p_burst integer)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT greatest(0, floor(extract(epoch FROM (p_now + p_burst * p_interval_us * interval '1 microsecond'
                                                  - greatest(p_tat, p_now))) * 1000000 / p_interval_us))::integer
$$;

REVOKE ALL ON FUNCTION pglock_rate_remaining(timestamptz, timestamptz, bigint, integer) FROM PUBLIC;

-- SQLSTATE 22023, COLUMN naming the argument, unless a key, its limit and a cost are valid: the
-- checks of pglock_rate_take's arguments.
CREATE OR REPLACE FUNCTION pglock_rate_check(p_durable boolean, p_rate_key varchar, p_interval_us bigint, p_burst integer,
                                             p_cost integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
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
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_check(boolean, varchar, bigint, integer, integer) FROM PUBLIC;

-- SQLSTATE 22023, COLUMN naming the argument, unless pglock_rate_take_many's arguments are valid.
CREATE OR REPLACE FUNCTION pglock_rate_check_many(p_durable boolean, p_keys varchar[], p_interval_us bigint[],
                                                  p_bursts integer[], p_costs integer[], p_max_wait_us bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_keys', 'p_interval_us', 'p_bursts', 'p_costs'],
        ARRAY[cardinality(p_keys), cardinality(p_interval_us), cardinality(p_bursts), cardinality(p_costs)]);
    IF p_durable IS NULL THEN
        RAISE EXCEPTION 'p_durable: must not be null' USING ERRCODE = '22023', COLUMN = 'p_durable';
    ELSIF cardinality(p_keys) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'p_keys: must hold 1 to 100 keys' USING ERRCODE = '22023', COLUMN = 'p_keys';
    ELSIF EXISTS (SELECT FROM unnest(p_keys) AS k WHERE k IS NULL OR k = '' OR length(k) > 255) THEN
        RAISE EXCEPTION 'p_keys: each must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_keys';
    ELSIF (SELECT count(DISTINCT k) FROM unnest(p_keys) AS k) <> cardinality(p_keys) THEN
        RAISE EXCEPTION 'p_keys: must be distinct' USING ERRCODE = '22023', COLUMN = 'p_keys';
    ELSIF EXISTS (SELECT FROM unnest(p_interval_us) AS i WHERE i IS NULL OR i < 1) THEN
        RAISE EXCEPTION 'p_interval_us: each must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_interval_us';
    ELSIF EXISTS (SELECT FROM unnest(p_bursts) AS b WHERE b IS NULL OR b < 1) THEN
        RAISE EXCEPTION 'p_bursts: each must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_bursts';
    ELSIF EXISTS (SELECT FROM unnest(p_costs, p_bursts) AS c(c, b) WHERE c.c IS NULL OR c.c < 1 OR c.c > c.b) THEN
        RAISE EXCEPTION 'p_costs: each must be from 1 to its burst' USING ERRCODE = '22023', COLUMN = 'p_costs';
    ELSIF p_max_wait_us IS NULL OR p_max_wait_us < 0 THEN
        RAISE EXCEPTION 'p_max_wait_us: must not be negative' USING ERRCODE = '22023', COLUMN = 'p_max_wait_us';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_rate_check_many(boolean, varchar[], bigint[], integer[], integer[], bigint) FROM PUBLIC;

-- Deletes up to 100 keys as fresh as new ones at p_now (their time has passed), the oldest
-- first, skipping rows in use: what about one decision in a hundred does, so that the table
-- holds the keys in use.
CREATE OR REPLACE FUNCTION pglock_rate_collect(p_durable boolean, p_now timestamptz)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    DELETE FROM pglock_rate_limits r
     WHERE (r.durable, r.rate_key) IN (
            SELECT e.durable, e.rate_key FROM pglock_rate_limits e
             WHERE e.durable = p_durable AND e.tat < p_now
             ORDER BY e.tat LIMIT 100
               FOR UPDATE SKIP LOCKED)
$$;

REVOKE ALL ON FUNCTION pglock_rate_collect(boolean, timestamptz) FROM PUBLIC;
