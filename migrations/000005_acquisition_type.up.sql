-- pglock SQL contract v5: pglock_attempt, the acquire as one pglock_acquisition value rather than a
-- set of one row, so that a query can call it inside an expression. PostgreSQL sets such a call
-- up far more cheaply than a set-returning function in FROM, even one that never runs: a try on a
-- held lock then costs little more than reading the lock row (queries/locks.sql). Every function
-- before it keeps its signature and result; pglock_acquire and v1's acquires now call it.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- The check runs as whoever migrates, so it names exact types: an operator or function that
-- matches exactly wins over pg_catalog's implicit casts, and a role that may create objects in
-- the schema could otherwise run code as the migrating role. Databases installed by an earlier
-- release have 000001's old check, which compared oid = 0: this is the text 000001 has now.
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
            USING ERRCODE = '42501',
                  HINT = pg_catalog.format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC, or install pglock into a schema of its own.', pg_catalog.current_schema());
    END IF;
END;
$$;
SELECT pglock_check_schema_is_safe();

CREATE TYPE pglock_acquisition AS (
    acquired      boolean,
    queued        boolean,
    holder_id     varchar,
    instance      varchar,
    fencing_token bigint,
    acquired_at   timestamptz,
    expires_at    timestamptz,
    metadata      jsonb,
    checked_at    timestamptz
);

COMMENT ON TYPE pglock_acquisition IS
    'The answer of pglock_attempt: the caller''s lock when acquired, else who holds it or is first in line.';

-- The one acquire (000002's pglock_acquire, now returning one value). Takes p_lock_name for
-- p_holder_id if it is free or expired and nobody is queued ahead, or if p_holder_id holds it
-- already (which extends it and keeps its token). Otherwise, with p_wait, queues p_holder_id (or
-- refreshes its place). Returns the caller's lock when acquired, else the current holder's, or
-- the reservation of the waiter a free lock is kept for (which has no token or acquired_at yet);
-- queued says whether this call wrote the caller's place in the queue, and checked_at is the
-- database time the answer holds for. Like v1's acquire, call it in a transaction of its own.
-- In an expression, expand it once (FROM, LATERAL or OFFSET 0): (pglock_attempt(...)).* calls
-- it once per column.
CREATE FUNCTION pglock_attempt(
    p_lock_name varchar,
    p_holder_id varchar,
    p_ttl_ms    bigint,
    p_metadata  jsonb   DEFAULT '{}',
    p_instance  varchar DEFAULT '',
    p_wait      boolean DEFAULT false
)
RETURNS pglock_acquisition
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lock       distributed_locks;
    v_waiter     distributed_lock_waiters;
    v_ttl        interval;
    v_now        timestamptz;
    v_fresh      boolean;
    v_last_token bigint;
    v_acquired   boolean;
    v_queued     boolean := false;
BEGIN
    -- Checked as plain expressions, which cost next to nothing; the helper that says exactly
    -- what is wrong runs only when something is.
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    IF p_ttl_ms IS NULL OR p_ttl_ms <= 0 OR p_ttl_ms > 86400000 THEN
        RAISE EXCEPTION 'p_ttl_ms: must be from 1 to 86400000 milliseconds (24 h), got %',
            coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023';
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_metadata: must be a JSON object, got %', jsonb_typeof(p_metadata)
            USING ERRCODE = '22023';
    END IF;
    IF length(p_instance) > 255 THEN
        RAISE EXCEPTION 'p_instance: % characters long, the limit is 255', length(p_instance)
            USING ERRCODE = '22023';
    END IF;
    v_ttl := p_ttl_ms * interval '1 millisecond';

    LOOP
        -- Plain reads first, in one statement: the lock, and the first live waiter in case the
        -- lock is free. A lock held by someone else is answered without locking a row or
        -- taking a transaction id (unless the caller is queued, which writes its place).
        v_now := clock_timestamp();
        SELECT l.lock_name, l.holder_id, l.fencing_token, l.acquired_at, l.expires_at, l.metadata,
               l.instance, w.holder_id, w.expires_at, w.metadata, w.instance
          INTO v_lock.lock_name, v_lock.holder_id, v_lock.fencing_token, v_lock.acquired_at,
               v_lock.expires_at, v_lock.metadata, v_lock.instance, v_waiter.holder_id,
               v_waiter.expires_at, v_waiter.metadata, v_waiter.instance
          FROM (SELECT) AS one
          LEFT JOIN distributed_locks l ON l.lock_name = p_lock_name
          LEFT JOIN LATERAL (SELECT * FROM distributed_lock_waiters w
                              WHERE w.lock_name = p_lock_name AND w.expires_at > v_now
                              ORDER BY w.waiter_seq LIMIT 1) w ON true;
        v_fresh := v_lock.lock_name IS NULL;
        IF (v_fresh OR v_lock.expires_at <= v_now)
           AND v_waiter.holder_id IS NOT NULL AND v_waiter.holder_id <> p_holder_id THEN
            -- A free lock belongs to the first live waiter, not to whoever asks first.
            v_lock := ROW(p_lock_name, v_waiter.holder_id, NULL, NULL, v_waiter.expires_at,
                          v_waiter.metadata, v_waiter.instance)::distributed_locks;
        END IF;

        IF v_lock.holder_id IS NOT NULL AND v_lock.holder_id <> p_holder_id
           AND v_lock.expires_at > v_now THEN
            IF p_wait THEN
                SELECT * INTO v_waiter FROM distributed_lock_waiters w
                 WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
                -- Rewrite the place only when a third of its life has gone: repeated polls
                -- by a waiter stay read-only.
                IF NOT FOUND OR v_waiter.expires_at < v_now + v_ttl * 2 / 3 THEN
                    INSERT INTO distributed_lock_waiters AS w
                        (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at)
                    VALUES (p_lock_name, p_holder_id, coalesce(p_instance, ''), p_ttl_ms,
                            coalesce(p_metadata, '{}'), v_now, v_now + v_ttl)
                    ON CONFLICT (lock_name, holder_id) DO UPDATE
                        SET instance   = excluded.instance,
                            ttl_ms     = excluded.ttl_ms,
                            metadata   = excluded.metadata,
                            expires_at = excluded.expires_at;
                    -- A release may have handed us the lock, deleting our place, after we read
                    -- the lock: our write then waited for it and made a new place. The caller
                    -- would count a lease from this poll, later than the handoff; so take the
                    -- lock here instead, which renews the lease from now.
                    IF EXISTS (SELECT FROM distributed_locks l
                                WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id) THEN
                        DELETE FROM distributed_lock_waiters w
                         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
                        CONTINUE;
                    END IF;
                    v_queued := true;
                END IF;
            END IF;
            v_acquired := false;
            EXIT;
        END IF;

        INSERT INTO distributed_locks AS l
            (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
        VALUES (p_lock_name, p_holder_id, nextval('distributed_locks_fencing_token_seq'), v_now,
                v_now + v_ttl, coalesce(p_metadata, '{}'), coalesce(p_instance, ''))
        ON CONFLICT (lock_name) DO UPDATE
            SET holder_id     = excluded.holder_id,
                -- A takeover draws its token here, with the row locked. Only a live lease
                -- keeps its token: a holder that lets its lease lapse and takes the lock again
                -- gets a new one, so its writes from before are fenced off.
                fencing_token = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.fencing_token
                                     ELSE nextval('distributed_locks_fencing_token_seq') END,
                acquired_at   = CASE WHEN l.holder_id = excluded.holder_id AND l.expires_at > clock_timestamp()
                                     THEN l.acquired_at
                                     ELSE excluded.acquired_at END,
                expires_at    = excluded.expires_at,
                metadata      = excluded.metadata,
                instance      = excluded.instance
            WHERE l.holder_id = excluded.holder_id OR l.expires_at <= clock_timestamp()
        RETURNING l.*, pg_sequence_last_value('distributed_locks_fencing_token_seq')
             INTO v_lock.lock_name, v_lock.holder_id, v_lock.fencing_token, v_lock.acquired_at,
                  v_lock.expires_at, v_lock.metadata, v_lock.instance, v_last_token;

        IF FOUND THEN
            -- A fresh row's token was drawn in VALUES, before the row was ours. If any token was
            -- drawn since, a holder may have come and gone while our row was landing: draw again,
            -- now that it is ours, so tokens follow the order in which holders held the name.
            IF v_fresh AND v_lock.fencing_token <> v_last_token THEN
                UPDATE distributed_locks l
                   SET fencing_token = nextval('distributed_locks_fencing_token_seq')
                 WHERE l.lock_name = p_lock_name
                RETURNING l.* INTO v_lock;
            END IF;
            IF p_wait THEN
                DELETE FROM distributed_lock_waiters w
                 WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
            END IF;
            v_acquired := true;
            EXIT;
        END IF;
        -- Lost a race between the read and the upsert: read again.
    END LOOP;

    RETURN ROW(v_acquired, v_queued, v_lock.holder_id, v_lock.instance, v_lock.fencing_token,
               v_lock.acquired_at, v_lock.expires_at, v_lock.metadata, v_now);
END;
$$;

-- pglock_acquire gives the same answer as a set of one row, as it always has.
CREATE OR REPLACE FUNCTION pglock_acquire(
    p_lock_name varchar,
    p_holder_id varchar,
    p_ttl_ms    bigint,
    p_metadata  jsonb   DEFAULT '{}',
    p_instance  varchar DEFAULT '',
    p_wait      boolean DEFAULT false
)
RETURNS TABLE (
    acquired      boolean,
    queued        boolean,
    holder_id     varchar,
    instance      varchar,
    fencing_token bigint,
    acquired_at   timestamptz,
    expires_at    timestamptz,
    metadata      jsonb,
    checked_at    timestamptz
)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
        SELECT a.* FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_ms, p_metadata, p_instance, p_wait) a;
END;
$$;

-- v1's acquires call the core directly, as before.
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
BEGIN
    RETURN QUERY
        SELECT a.acquired, a.holder_id, a.fencing_token, a.acquired_at, a.expires_at, a.metadata
          FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_ms, p_metadata) a;
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
DECLARE
    v_acquired boolean;
BEGIN
    IF p_ttl_seconds IS NULL OR p_ttl_seconds <= 0 OR p_ttl_seconds > 86400 THEN
        RAISE EXCEPTION 'p_ttl_seconds: must be from 1 to 86400 seconds (24 h), got %',
            coalesce(p_ttl_seconds::text, 'null') USING ERRCODE = '22023';
    END IF;
    SELECT a.acquired INTO v_acquired
      FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a;
    RETURN v_acquired;
END;
$$;

REVOKE ALL ON FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

-- pglock_attempt and its result type belong to whoever owns pglock_acquire, which calls it with
-- that owner's rights: migrating as another role (a superuser, say) must not change whose
-- rights the acquire runs with. Whoever may call pglock_acquire may call pglock_attempt, which
-- pglock's Go packages now use: a role granted what docs/sql.md listed before keeps working.
-- This block runs as the migrating role, so it names exact types (see the check above).
DO $$
DECLARE
    v_acquire pg_catalog.oid := 'pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean)'::pg_catalog.regprocedure::pg_catalog.oid;
    v_owner   pg_catalog.regrole;
    v_grant   record;
BEGIN
    SELECT p.proowner::pg_catalog.regrole INTO v_owner FROM pg_catalog.pg_proc p WHERE p.oid = v_acquire;
    EXECUTE pg_catalog.format(
        'ALTER FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean) OWNER TO %s', v_owner);
    EXECUTE pg_catalog.format('ALTER TYPE pglock_acquisition OWNER TO %s', v_owner);
    FOR v_grant IN SELECT a.grantee, a.is_grantable
                     FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
                    WHERE p.oid = v_acquire AND a.privilege_type = 'EXECUTE'::pg_catalog.text
                      AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format(
            'GRANT EXECUTE ON FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean) TO %s%s',
            CASE WHEN v_grant.grantee = 0::pg_catalog.oid THEN 'PUBLIC' ELSE v_grant.grantee::pg_catalog.regrole::pg_catalog.text END,
            CASE WHEN v_grant.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END;
$$;

COMMIT;
