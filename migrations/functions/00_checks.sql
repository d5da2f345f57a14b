-- Checks every other function relies on: the schema is safe, names and holders are valid, TTLs are
-- in range, arrays agree.

-- SECURITY DEFINER functions are only as safe as the schema they resolve names in: a role that
-- may create objects there can shadow what they call (an exact-type length(varchar) beats
-- pg_catalog's length(text)) and run code as the owner. Refuse a schema every role may write.
CREATE OR REPLACE FUNCTION pglock_check_schema_is_safe()
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n,
                      pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n'::"char", n.nspowner))) a
                WHERE n.nspname = pg_catalog.current_schema()
                  AND a.grantee = 0::pg_catalog.oid AND a.privilege_type = 'CREATE'::pg_catalog.text) THEN
        RAISE EXCEPTION 'pglock: every role may create objects in schema %, so they could hijack pglock''s SECURITY DEFINER functions', pg_catalog.current_schema()
            USING ERRCODE = '42501', CONSTRAINT = 'pglock_schema_is_safe', SCHEMA = pg_catalog.current_schema(),
                  HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC, or install pglock into a schema of its own.', pg_catalog.current_schema());
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_schema_is_safe() FROM PUBLIC;

SELECT pglock_check_schema_is_safe();

-- Raises SQLSTATE 22023, with COLUMN naming the argument, for a lock name or holder id that no
-- row could carry.
CREATE OR REPLACE FUNCTION pglock_check_name_and_holder(p_lock_name varchar, p_holder_id varchar)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_lock_name IS NULL OR p_lock_name = '' THEN
        RAISE EXCEPTION 'p_lock_name: must not be null or empty' USING ERRCODE = '22023', COLUMN = 'p_lock_name';
    END IF;
    IF length(p_lock_name) > 255 THEN
        RAISE EXCEPTION 'p_lock_name: % characters long, the limit is 255', length(p_lock_name)
            USING ERRCODE = '22023', COLUMN = 'p_lock_name';
    END IF;
    IF p_holder_id IS NULL OR p_holder_id = '' THEN
        RAISE EXCEPTION 'p_holder_id: must not be null or empty' USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
    IF length(p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_holder_id: % characters long, the limit is 255', length(p_holder_id)
            USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_name_and_holder(varchar, varchar) FROM PUBLIC;

-- The one rule for every lease, waiter's place, job attempt and cron run: from 100 ms to 24 h,
-- in milliseconds. A shorter lease could not be renewed in time over a network; the Go side
-- refuses the same (MinTTL, MaxTTL). The rule is SQL, so that the planner inlines it into the
-- callers' checks at no cost; pglock_raise_bad_ttl, which says what is wrong, runs only when
-- something is: callers check with
--     IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms'); END IF;
CREATE OR REPLACE FUNCTION pglock_ttl_ok(p_ttl_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_ttl_ms OPERATOR(pg_catalog.>=) 100 AND p_ttl_ms OPERATOR(pg_catalog.<=) 86400000;

-- Raises SQLSTATE 22023 with COLUMN p_argument for a TTL of p_ttl_ms milliseconds (given in
-- milliseconds even for an argument in seconds).
CREATE OR REPLACE FUNCTION pglock_raise_bad_ttl(p_ttl_ms bigint, p_argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION '%: a TTL must be from 100 to 86400000 milliseconds (24 h), got % ms',
        p_argument, coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023', COLUMN = p_argument;
END;
$$;

REVOKE ALL ON FUNCTION pglock_raise_bad_ttl(bigint, text) FROM PUBLIC;

-- Raises 22023 for arrays that are not all of the first one's length; the COLUMN field names the
-- first array that is not (the first one when it is NULL).
CREATE OR REPLACE FUNCTION pglock_check_arrays(p_names text[], p_lengths integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_lengths[1] IS NULL THEN
        RAISE EXCEPTION '%: must not be NULL', p_names[1] USING ERRCODE = '22023', COLUMN = p_names[1];
    END IF;
    FOR i IN 2 .. cardinality(p_lengths) LOOP
        IF p_lengths[i] IS DISTINCT FROM p_lengths[1] THEN
            RAISE EXCEPTION '%: % elements, where % has %', p_names[i], coalesce(p_lengths[i]::text, 'NULL'),
                p_names[1], p_lengths[1] USING ERRCODE = '22023', COLUMN = p_names[i];
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_arrays(text[], integer[]) FROM PUBLIC;

-- Raises 22023 (COLUMN p_ttl_ms) for the first TTL of p_ttl_ms that pglock_ttl_ok refuses, as
-- the batch renewals of job attempts, debounced runs and cron runs check theirs.
CREATE OR REPLACE FUNCTION pglock_check_ttls(p_ttl_ms bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bad bigint;
BEGIN
    SELECT r.t INTO v_bad FROM unnest(p_ttl_ms) AS r(t) WHERE pglock_ttl_ok(r.t) IS NOT TRUE LIMIT 1;
    IF FOUND THEN
        PERFORM pglock_raise_bad_ttl(v_bad, 'p_ttl_ms');
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_ttls(bigint[]) FROM PUBLIC;

-- Raises 22023 (COLUMN p_grace_ms) unless a fence's grace is from 0 to 24 h.
CREATE OR REPLACE FUNCTION pglock_check_grace(p_grace_ms bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_grace_ms IS NULL OR p_grace_ms < 0 OR p_grace_ms > 86400000 THEN
        RAISE EXCEPTION 'p_grace_ms: must be from 0 to 86400000 milliseconds (24 h), got %',
            coalesce(p_grace_ms::text, 'null') USING ERRCODE = '22023', COLUMN = 'p_grace_ms';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_grace(bigint) FROM PUBLIC;

-- Raises 22023 for lease arrays a batch function cannot take: not of one length, or an element
-- with a bad lock name, holder or TTL (COLUMN names the argument, as for a single lease).
CREATE OR REPLACE FUNCTION pglock_check_leases(p_lock_names varchar[], p_holder_ids varchar[], p_ttl_ms bigint[])
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_bad record;
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_lock_names', 'p_holder_ids', 'p_ttl_ms'],
        ARRAY[cardinality(p_lock_names), cardinality(p_holder_ids), cardinality(p_ttl_ms)]);
    SELECT r.n, r.h, r.t INTO v_bad
      FROM unnest(p_lock_names, p_holder_ids, p_ttl_ms) AS r(n, h, t)
     WHERE r.n IS NULL OR r.h IS NULL OR length(r.n) NOT BETWEEN 1 AND 255
        OR length(r.h) NOT BETWEEN 1 AND 255 OR pglock_ttl_ok(r.t) IS NOT TRUE
     LIMIT 1;
    IF FOUND THEN
        IF pglock_ttl_ok(v_bad.t) IS NOT TRUE THEN
            PERFORM pglock_raise_bad_ttl(v_bad.t, 'p_ttl_ms');
        END IF;
        PERFORM pglock_check_name_and_holder(v_bad.n, v_bad.h);
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_leases(varchar[], varchar[], bigint[]) FROM PUBLIC;
