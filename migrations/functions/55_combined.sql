-- Combined acquisitions: several locks and semaphores' places, taken for one holder all together
-- or not at all.

-- Takes for p_holder_id every resource listed, in one statement: the lock
-- p_names[i] where p_places[i] is NULL, else p_places[i] of the p_permits[i] places of the
-- semaphore p_names[i], counted against p_keys[i] (NULL: '') with at most p_per_keys[i] places
-- a key (NULL: no cap), as pglock_attempt and pglock_semaphore_take take one (a lock's p_permits,
-- p_keys and p_per_keys are not read). Every resource is judged as a single acquisition of it
-- would be, waiters ahead of the caller included. Resources are taken in canonical order: the
-- semaphores' advisory locks first, then each resource, both by name (a semaphore's name counts as
-- 'pglock.semaphore/<name>'); so two such statements never wait for each other in a cycle.
--
-- A try (p_wait false) that a resource refuses takes nothing: what it took is undone. A poll
-- (p_wait true) is ordered locking: it takes, or keeps (renewing them), the resources before the
-- first that refuses it, waiting_for; keeps a place in waiting_for's queue, as a single
-- acquisition of it does; and gives up whatever it holds or has queued for after it, in order (a
-- lock handed to it by a release goes to its next waiter; handed_on says so). A caller holds only
-- resources before the one it waits for, so waits never form a cycle, and it keeps its turn at
-- each resource it has reached. Returns acquired; then lock_names and fencing_tokens, each
-- resource's row and token in the order given, and expires_at, the earliest lease's end; else
-- waiting_for, the name of the first resource that refused (a semaphore's as
-- 'pglock.semaphore/<name>'). Either way next_holder_ids names the other waiters its semaphores
-- would admit now (to wake). Call it in a READ COMMITTED
-- transaction of its own. SQLSTATE 22023 with COLUMN for arrays of unequal lengths, no resource
-- or more than 64, a NULL name, a resource listed twice, a lock named as a semaphore's rows, and
-- whatever pglock_attempt or pglock_semaphore_take refuses; nothing is written then.
CREATE OR REPLACE FUNCTION pglock_take_all(p_holder_id varchar, p_names varchar[], p_places integer[], p_permits integer[],
                                           p_keys varchar[], p_per_keys integer[], p_ttl_ms bigint, p_metadata jsonb,
                                           p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, waiting_for varchar, lock_names varchar[], fencing_tokens bigint[],
               expires_at timestamptz, next_holder_ids varchar[], handed_on boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_order    integer[]; -- the resources' indexes in canonical order
    v_ids      varchar[]; -- each resource's name as the canonical order sorts it: a semaphore's is its queue's
    v_distinct integer;
    v_refused  integer;   -- the position, in v_order, of the first resource that refused
    v_i        integer;
    v_lock     pglock_acquisition;
    v_take     record;
    v_row      varchar;
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_names', 'p_places', 'p_permits', 'p_keys', 'p_per_keys'],
        ARRAY[cardinality(p_names), cardinality(p_places), cardinality(p_permits), cardinality(p_keys),
              cardinality(p_per_keys)]);
    IF cardinality(p_names) NOT BETWEEN 1 AND 64 THEN
        RAISE EXCEPTION 'p_names: from 1 to 64 resources, not %', cardinality(p_names)
            USING ERRCODE = '22023', COLUMN = 'p_names';
    ELSIF array_position(p_names, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_names: a name is not NULL' USING ERRCODE = '22023', COLUMN = 'p_names';
    END IF;
    SELECT array_agg(r.id ORDER BY r.i), array_agg(r.i ORDER BY r.id COLLATE "C"), count(DISTINCT r.id)
      INTO v_ids, v_order, v_distinct
      FROM (SELECT s.i, CASE WHEN p_places[s.i] IS NULL THEN p_names[s.i] ELSE 'pglock.semaphore/' || p_names[s.i] END AS id
              FROM generate_subscripts(p_names, 1) AS s(i)) AS r;
    IF v_distinct < cardinality(p_names) THEN
        RAISE EXCEPTION 'p_names: a resource is listed twice' USING ERRCODE = '22023', COLUMN = 'p_names';
    ELSIF EXISTS (SELECT FROM generate_subscripts(p_names, 1) AS s(i)
                   WHERE p_places[s.i] IS NULL AND p_names[s.i] ~>=~ 'pglock.semaphore/' AND p_names[s.i] ~<~ 'pglock.semaphore0') THEN
        RAISE EXCEPTION 'p_names: names starting ''pglock.semaphore/'' are a semaphore''s rows, not a lock''s'
            USING ERRCODE = '22023', COLUMN = 'p_names';
    END IF;
    -- The semaphores' advisory locks, for the whole transaction: pglock_semaphore_take takes each
    -- again (it is reentrant), and one taken in the block below would go with the block.
    PERFORM pg_advisory_xact_lock(pglock_advisory_key(p_names[i], 'pglock.semaphore'))
       FROM unnest(v_order) AS o(i) WHERE p_places[i] IS NOT NULL;

    acquired := false;
    handed_on := false;
    lock_names := array_fill(NULL::varchar, ARRAY[cardinality(p_names)]);
    fencing_tokens := array_fill(NULL::bigint, ARRAY[cardinality(p_names)]);
    BEGIN
        FOR v_pos IN 1 .. cardinality(v_order) LOOP
            v_i := v_order[v_pos];
            IF p_places[v_i] IS NULL THEN
                -- A lock the caller holds already (taken by an earlier poll, or handed over by a
                -- release) is extended, keeping its token.
                v_lock := pglock_attempt(p_names[v_i], p_holder_id, p_ttl_ms, p_metadata, p_instance, p_wait);
                IF v_lock.acquired THEN
                    lock_names[v_i] := p_names[v_i];
                    fencing_tokens[v_i] := v_lock.fencing_token;
                    expires_at := least(expires_at, v_lock.expires_at);
                END IF;
            ELSE
                -- So are places an earlier poll took.
                UPDATE distributed_locks l SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
                 WHERE l.lock_name = v_ids[v_i] || '/' || p_holder_id AND l.holder_id = p_holder_id
                   AND l.expires_at > clock_timestamp()
                RETURNING true AS acquired, l.lock_name, l.fencing_token, l.expires_at, NULL::varchar[] AS next_holder_ids
                     INTO v_take;
                IF NOT FOUND THEN
                    SELECT t.acquired, t.lock_name, t.fencing_token, t.expires_at, t.next_holder_ids INTO v_take
                      FROM pglock_semaphore_take(p_names[v_i], p_holder_id, p_places[v_i], p_permits[v_i],
                                                 coalesce(p_keys[v_i], ''), p_per_keys[v_i], p_ttl_ms, p_metadata,
                                                 p_instance, p_wait) AS t;
                END IF;
                IF v_take.acquired THEN
                    lock_names[v_i] := v_take.lock_name;
                    fencing_tokens[v_i] := v_take.fencing_token;
                    expires_at := least(expires_at, v_take.expires_at);
                END IF;
                next_holder_ids := next_holder_ids || v_take.next_holder_ids;
            END IF;
            IF lock_names[v_i] IS NULL THEN
                v_refused := v_pos;
                IF NOT p_wait THEN
                    RAISE EXCEPTION USING ERRCODE = 'PLK01'; -- a try: what it took is undone
                END IF;
                EXIT; -- a poll: queued there (pglock_attempt and pglock_semaphore_take did it)
            END IF;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'PLK01' THEN
        NULL;
    END;

    IF v_refused IS NULL THEN
        acquired := true;
        RETURN NEXT;
        RETURN;
    END IF;
    waiting_for := v_ids[v_order[v_refused]];
    lock_names := NULL;
    fencing_tokens := NULL;
    expires_at := NULL;
    -- What comes after waiting_for goes, in order: a lock handed to the caller (to its next
    -- waiter), a place, a place in a queue.
    FOR v_pos IN v_refused + 1 .. cardinality(v_order) LOOP
        v_i := v_order[v_pos];
        v_row := CASE WHEN p_places[v_i] IS NULL THEN p_names[v_i] ELSE v_ids[v_i] || '/' || p_holder_id END;
        IF EXISTS (SELECT FROM distributed_locks l WHERE l.lock_name = v_row AND l.holder_id = p_holder_id) THEN
            SELECT handed_on OR r.handed_off INTO handed_on FROM pglock_release(v_row, p_holder_id) AS r;
        END IF;
        DELETE FROM distributed_lock_waiters w WHERE w.lock_name = v_ids[v_i] AND w.holder_id = p_holder_id;
    END LOOP;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb,
                                       varchar, boolean) FROM PUBLIC;
