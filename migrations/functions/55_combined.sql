-- Combined acquisitions: several locks and semaphores' places, taken for one holder all together
-- or not at all.

-- Takes for p_holder_id every resource listed, all of them or none, in one statement: the lock
-- p_names[i] where p_places[i] is NULL, else p_places[i] of the p_permits[i] places of the
-- semaphore p_names[i], counted against p_keys[i] (NULL: '') with at most p_per_keys[i] places
-- a key (NULL: no cap), as pglock_attempt and pglock_semaphore_take take one (a lock's p_permits,
-- p_keys and p_per_keys are not read). Every resource is judged as a single acquisition of it
-- would be, waiters ahead of the caller included. Resources are taken in canonical order: the
-- semaphores' advisory locks first, then each resource, both by name (a semaphore's name counts as
-- 'pglock.semaphore/<name>'); so two such statements never wait for each other in a cycle.
--
-- When a resource refuses, nothing this statement took stays taken; with p_wait the caller then
-- keeps a place in the queue of that one resource (waiting_for), and none in the others', so it
-- reserves nothing it is not next for. What the caller holds from before (a lock handed to it by
-- a release since it queued for it, or a place taken as it queued, the resource having come free
-- meanwhile) stays its own if it comes before waiting_for in the canonical order (its lease is
-- renewed for p_ttl_ms) and is released (a lock handed on) if it comes after: the caller holds
-- only resources before the one it waits for, as in ordered locking, which is why waits never
-- form a cycle. Returns acquired; then lock_names and fencing_tokens, each resource's row and token in
-- the order given, and expires_at, the earliest lease's end; else waiting_for, the name of the
-- first resource that refused (a semaphore's as 'pglock.semaphore/<name>'), and next_holder_ids,
-- the waiters a refusing semaphore would admit now (to wake). Call it in a READ COMMITTED
-- transaction of its own. SQLSTATE 22023 with COLUMN for arrays of unequal lengths, no resource
-- or more than 64, a NULL name, a resource listed twice, a lock named as a semaphore's rows, and
-- whatever pglock_attempt or pglock_semaphore_take refuses; nothing is written then.
CREATE OR REPLACE FUNCTION pglock_take_all(p_holder_id varchar, p_names varchar[], p_places integer[], p_permits integer[],
                                           p_keys varchar[], p_per_keys integer[], p_ttl_ms bigint, p_metadata jsonb,
                                           p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, waiting_for varchar, lock_names varchar[], fencing_tokens bigint[],
               expires_at timestamptz, next_holder_ids varchar[])
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
    lock_names := array_fill(NULL::varchar, ARRAY[cardinality(p_names)]);
    fencing_tokens := array_fill(NULL::bigint, ARRAY[cardinality(p_names)]);
    BEGIN
        FOR v_pos IN 1 .. cardinality(v_order) LOOP
            v_i := v_order[v_pos];
            IF p_places[v_i] IS NULL THEN
                -- A lock the caller holds already (handed over by a release) is extended, keeping its token.
                v_lock := pglock_attempt(p_names[v_i], p_holder_id, p_ttl_ms, p_metadata, p_instance, false);
                IF v_lock.acquired THEN
                    lock_names[v_i] := p_names[v_i];
                    fencing_tokens[v_i] := v_lock.fencing_token;
                    expires_at := least(expires_at, v_lock.expires_at);
                END IF;
            ELSE
                -- A place the caller holds already (a poll's, taken after a refusal) is extended.
                UPDATE distributed_locks l SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
                 WHERE l.lock_name = 'pglock.semaphore/' || p_names[v_i] || '/' || p_holder_id
                   AND l.holder_id = p_holder_id AND l.expires_at > clock_timestamp()
                RETURNING true AS acquired, l.lock_name, l.fencing_token, l.expires_at INTO v_take;
                IF NOT FOUND THEN
                    SELECT t.acquired, t.lock_name, t.fencing_token, t.expires_at INTO v_take
                      FROM pglock_semaphore_take(p_names[v_i], p_holder_id, p_places[v_i], p_permits[v_i],
                                                 coalesce(p_keys[v_i], ''), p_per_keys[v_i], p_ttl_ms, p_metadata,
                                                 p_instance, false) AS t;
                END IF;
                IF v_take.acquired THEN
                    lock_names[v_i] := v_take.lock_name;
                    fencing_tokens[v_i] := v_take.fencing_token;
                    expires_at := least(expires_at, v_take.expires_at);
                END IF;
            END IF;
            IF lock_names[v_i] IS NULL THEN
                v_refused := v_pos;
                RAISE EXCEPTION USING ERRCODE = 'PLK01'; -- undoes the block's takes
            END IF;
        END LOOP;
        acquired := true;
    EXCEPTION WHEN SQLSTATE 'PLK01' THEN
        lock_names := NULL;
        fencing_tokens := NULL;
        expires_at := NULL;
    END;

    IF acquired THEN -- the places the caller kept in queues, while it waited, go
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = ANY (v_ids) AND w.holder_id = p_holder_id;
        RETURN NEXT;
        RETURN;
    END IF;

    waiting_for := v_ids[v_order[v_refused]];
    -- What the caller holds from before (a lock handed to it, a place a poll took): what comes
    -- before waiting_for stays its own, renewed; what comes after goes (a lock to its next waiter).
    FOR v_pos IN 1 .. cardinality(v_order) LOOP
        v_i := v_order[v_pos];
        CONTINUE WHEN v_pos = v_refused;
        v_row := CASE WHEN p_places[v_i] IS NULL THEN p_names[v_i] ELSE v_ids[v_i] || '/' || p_holder_id END;
        IF v_pos < v_refused THEN
            UPDATE distributed_locks l SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
             WHERE l.lock_name = v_row AND l.holder_id = p_holder_id AND l.expires_at > clock_timestamp();
        ELSIF EXISTS (SELECT FROM distributed_locks l WHERE l.lock_name = v_row AND l.holder_id = p_holder_id) THEN
            PERFORM pglock_release(v_row, p_holder_id);
        END IF;
    END LOOP;
    -- A place in one queue only: waiting_for's.
    DELETE FROM distributed_lock_waiters w
     WHERE w.lock_name = ANY (v_ids) AND w.lock_name <> waiting_for AND w.holder_id = p_holder_id;
    IF p_wait THEN
        v_i := v_order[v_refused];
        -- Queued as a single acquisition is; should the resource have come free meanwhile (a
        -- release needs no advisory lock), this takes it instead, and the next poll counts it.
        IF p_places[v_i] IS NULL THEN
            PERFORM pglock_attempt(p_names[v_i], p_holder_id, p_ttl_ms, p_metadata, p_instance, true);
        ELSE
            SELECT t.next_holder_ids INTO next_holder_ids
              FROM pglock_semaphore_take(p_names[v_i], p_holder_id, p_places[v_i], p_permits[v_i],
                                         coalesce(p_keys[v_i], ''), p_per_keys[v_i], p_ttl_ms, p_metadata,
                                         p_instance, true) AS t;
        END IF;
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb,
                                       varchar, boolean) FROM PUBLIC;
