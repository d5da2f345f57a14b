-- Semaphores: n places of one name, each holder a row of distributed_locks that takes one or
-- more of them and counts against a key.

-- Takes p_places of the p_permits places of semaphore p_name for p_holder_id, counted against
-- p_key, of which at most p_per_key places may be held at once (NULL: no cap); with p_wait, a
-- caller that cannot have them takes (or keeps) a place in the queue. The queue is served in
-- turns (start-time fair queueing): a waiter's turn, given when it queues, follows the places
-- its key's waiters before it want, and is no earlier than the queue's first turn nor the latest
-- turn a holder was admitted at (holders keep theirs); waiters are
-- served by turn, then arrival. So within a key the order is arrival, and across keys the turns
-- alternate, weighted by places: one key's long queue never delays another key's first waiter
-- by more than a turn. A waiter whose key is at its cap is passed over; any other keeps its
-- room from everyone after it, so that a caller is admitted only if it fits with all of those
-- ahead of it. p_permits and p_per_key apply from the next attempt on; holders keep their
-- places. Attempts on one name are serialized by a transaction-level advisory lock, held for
-- the statement; expired places are deleted first, waiting for a renewal or a fenced
-- transaction that holds one. Names have no '/'. Only READ COMMITTED transactions may call it
-- (SQLSTATE 0A000 otherwise). Returns acquired (and then lock_name, the holder's row, its
-- fencing_token and expires_at), queued (this call wrote the caller's place), holders, the
-- places held, and next_holder_ids, the other waiters that would be admitted now, looked for
-- among the queue's first 2 * p_permits + 64 rows (and, if none fits there while they leave
-- room, the first one of the next 512 that does): whoever can wake them should. SQLSTATE 22023 with COLUMN for
-- a name whose holder rows' names would be over 255 characters, places under 1 or above
-- p_permits or p_per_key, permits or a cap under 1, a NULL key or one over 255 characters, or a
-- TTL out of range.
CREATE OR REPLACE FUNCTION pglock_semaphore_take(p_name varchar, p_holder_id varchar, p_places integer, p_permits integer,
                                      p_key varchar, p_per_key integer, p_ttl_ms bigint, p_metadata jsonb,
                                      p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, queued boolean, lock_name varchar, fencing_token bigint, expires_at timestamptz,
               holders integer, next_holder_ids varchar[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_queue    varchar;
    v_prefix   varchar;
    v_now      timestamptz;
    v_seq      bigint;
    v_turn     bigint;
    v_expired  boolean;
    v_first    bigint; -- the queue's first live turn
    v_latest   bigint; -- the end of the latest turn a live holder was admitted at
    v_key_held integer;
    v_key_full boolean := false;
    v_limit    bigint;
    v_seen     integer;
    v_keeping  bigint;
    v_capped   varchar[];
    v_last_turn bigint;
    v_last_seq  bigint;
    v_next      record;
BEGIN
    IF p_name IS NULL OR p_name = '' OR strpos(p_name, '/') > 0 OR p_holder_id IS NULL OR p_holder_id = ''
       OR length('pglock.semaphore/' || p_name || '/' || p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_name: a semaphore''s name has no ''/'', and its holder rows are named ''pglock.semaphore/<name>/<holder>'', at most 255 characters'
            USING ERRCODE = '22023', COLUMN = 'p_name';
    ELSIF p_permits IS NULL OR p_permits < 1 THEN
        RAISE EXCEPTION 'p_permits: must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_permits';
    ELSIF p_per_key < 1 THEN
        RAISE EXCEPTION 'p_per_key: must be at least 1, or NULL for no cap' USING ERRCODE = '22023', COLUMN = 'p_per_key';
    ELSIF p_places IS NULL OR p_places < 1 OR p_places > p_permits OR p_places > p_per_key THEN
        RAISE EXCEPTION 'p_places: % places of a semaphore of % with at most % a key', p_places, p_permits, coalesce(p_per_key, p_permits)
            USING ERRCODE = '22023', COLUMN = 'p_places';
    ELSIF p_key IS NULL OR length(p_key) > 255 THEN
        RAISE EXCEPTION 'p_key: a key is not NULL, at most 255 characters' USING ERRCODE = '22023', COLUMN = 'p_key';
    ELSIF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    -- A snapshot older than the advisory lock would miss holders admitted meanwhile.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pglock_semaphore_take runs only in READ COMMITTED transactions, not %',
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

    SELECT w.waiter_seq, w.turn, w.expires_at <= v_now INTO v_seq, v_turn, v_expired FROM distributed_lock_waiters w
     WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
    IF v_expired THEN -- a place in the queue that expired is given up: its waiter queues again, at the back
        DELETE FROM distributed_lock_waiters w WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
        v_seq := NULL;
    END IF;
    SELECT coalesce(sum(l.places), 0)::integer, coalesce(sum(l.places) FILTER (WHERE l.semaphore_key = p_key), 0)::integer,
           max(l.turn + l.places),
           (SELECT w.turn FROM distributed_lock_waiters w
             WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0' -- the indexes'
               AND w.lock_name = v_queue AND w.expires_at > v_now
             ORDER BY w.turn, w.waiter_seq LIMIT 1)
      INTO holders, v_key_held, v_latest, v_first FROM distributed_locks l
     WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0' -- the index's
       AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0') AND l.expires_at > v_now;
    IF v_seq IS NULL THEN
        -- The turn it would queue with: after its key's waiters, and not before the queue's first
        -- turn nor the end of the latest turn admitted (a waiter passed over at the front, its key
        -- at its cap, must not hold the turns back for every newcomer, nor let a key that asks
        -- again as soon as it releases go ahead of those queued each time).
        v_turn := coalesce(greatest(v_first, v_latest,
                                    (SELECT w.turn + w.places FROM distributed_lock_waiters w
                                      WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0'
                                        AND w.lock_name = v_queue AND w.semaphore_key = p_key AND w.expires_at > v_now
                                        AND v_first IS NOT NULL
                                      ORDER BY w.waiter_seq DESC LIMIT 1)), 0);
    END IF;

    IF v_first IS NULL THEN -- nobody waits: room is all it takes
        acquired := holders::bigint + p_places <= p_permits AND (p_per_key IS NULL OR v_key_held::bigint + p_places <= p_per_key);
    ELSE
        IF p_per_key IS NOT NULL THEN
            -- The caller's key at its cap with those of its waiters before it: no room. Its first
            -- p_per_key waiters tell (each wants a place at least), however long its queue.
            SELECT v_key_held::bigint + coalesce(sum(a.places), 0) + p_places > p_per_key INTO v_key_full
              FROM (SELECT w.places FROM distributed_lock_waiters w
                     WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0'
                       AND w.lock_name = v_queue AND w.semaphore_key = p_key AND w.expires_at > v_now
                       AND w.holder_id <> p_holder_id AND (v_seq IS NULL OR w.waiter_seq < v_seq)
                     ORDER BY w.waiter_seq LIMIT p_per_key) AS a;
        END IF;

        -- The queue in order, the caller in it at its turn: a waiter keeps its room if its key's
        -- holders' places and those its key's waiters before it want leave it under the cap, and
        -- fits if it would with every waiter before it that keeps its room. Those are read from
        -- the queue's first rows (a waiter's key's earlier waiters come before it), which decide
        -- whether the caller fits unless it comes after them with room left under both limits: then
        -- from all rows.
        v_limit := 2::bigint * p_permits + 64;
        LOOP
            WITH held AS (
                SELECT l.semaphore_key AS key, sum(l.places)::integer AS places FROM distributed_locks l
                 WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0'
                   AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0') AND l.expires_at > v_now
                 GROUP BY l.semaphore_key
            ), queue AS (
                (SELECT w.holder_id, w.semaphore_key AS key, w.places, w.turn, w.waiter_seq AS seq FROM distributed_lock_waiters w
                  WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0'
                    AND w.lock_name = v_queue AND w.expires_at > v_now AND w.holder_id <> p_holder_id
                 UNION ALL
                 SELECT p_holder_id, p_key, p_places, v_turn, coalesce(v_seq, 9223372036854775807))
                ORDER BY turn, seq LIMIT v_limit
            ), ranked AS (
                SELECT q.holder_id, q.key, q.places, q.turn, q.seq,
                       p_per_key IS NULL
                       OR coalesce(h.places, 0) + coalesce(sum(q.places) OVER (PARTITION BY q.key ORDER BY q.seq
                                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                          + q.places <= p_per_key AS keeps_room
                  FROM queue q LEFT JOIN held h ON h.key = q.key
            ), fitted AS (
                SELECT r.holder_id, r.key, r.turn, r.seq, r.places, r.keeps_room,
                       r.keeps_room
                       AND holders::bigint + r.places + coalesce(sum(r.places) FILTER (WHERE r.keeps_room) OVER (ORDER BY r.turn, r.seq
                                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) <= p_permits AS fits
                  FROM ranked r
            )
            SELECT bool_or(f.fits) FILTER (WHERE f.holder_id = p_holder_id),
                   array_agg(f.holder_id ORDER BY f.turn, f.seq) FILTER (WHERE f.fits AND f.holder_id <> p_holder_id),
                   count(*), coalesce(sum(f.places) FILTER (WHERE f.keeps_room), 0),
                   coalesce(array_agg(DISTINCT f.key) FILTER (WHERE NOT f.keeps_room), '{}'),
                   max(f.turn), (array_agg(f.seq ORDER BY f.turn DESC, f.seq DESC))[1]
              INTO acquired, next_holder_ids, v_seen, v_keeping, v_capped, v_last_turn, v_last_seq
              FROM fitted f;
            EXIT WHEN v_limit IS NULL OR v_seen < v_limit
                   OR acquired IS NOT NULL OR holders::bigint + v_keeping + p_places > p_permits OR v_key_full;
            v_limit := NULL; -- all of them
        END LOOP;
        acquired := coalesce(acquired, false);

        -- Which waiter fits next, if none of the first rows does while they leave room: one after
        -- them, of a key not at its cap among them (a key's turns follow each other, so the rest of a
        -- capped key's waiters are capped too). The first whose key leaves it room is the only
        -- candidate: if it does not fit, nobody after it does. The search reads the next 512 rows
        -- at most, and passes over a few keys found at their cap on the way: a waiter further back
        -- is found by another poll (its own, or one of a Locker's first waiter, once it is first).
        IF next_holder_ids IS NULL AND v_limit IS NOT NULL AND v_seen = v_limit AND holders::bigint + v_keeping < p_permits THEN
            FOR v_next IN
                SELECT a.holder_id, a.semaphore_key, a.places, a.waiter_seq
                  FROM (SELECT w.holder_id, w.semaphore_key, w.places, w.turn, w.waiter_seq FROM distributed_lock_waiters w
                         WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0'
                           AND w.lock_name = v_queue AND w.expires_at > v_now AND w.holder_id <> p_holder_id
                           AND (w.turn, w.waiter_seq) > (v_last_turn, v_last_seq)
                         ORDER BY w.turn, w.waiter_seq LIMIT 512) AS a -- a bounded look
                 WHERE a.semaphore_key <> ALL (v_capped)
                 ORDER BY a.turn, a.waiter_seq LIMIT 8
            LOOP
                CONTINUE WHEN v_next.semaphore_key = ANY (v_capped);
                IF p_per_key IS NULL OR (SELECT coalesce(sum(l.places), 0) FROM distributed_locks l
                                          WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0'
                                            AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0')
                                            AND l.expires_at > v_now AND l.semaphore_key = v_next.semaphore_key)
                                        + (SELECT coalesce(sum(w.places), 0) FROM distributed_lock_waiters w
                                            WHERE w.lock_name ~>=~ 'pglock.semaphore/' AND w.lock_name ~<~ 'pglock.semaphore0'
                                              AND w.lock_name = v_queue AND w.expires_at > v_now
                                              AND w.semaphore_key = v_next.semaphore_key AND w.waiter_seq < v_next.waiter_seq)
                                        + v_next.places <= p_per_key THEN
                    IF holders::bigint + v_keeping + v_next.places <= p_permits THEN
                        next_holder_ids := ARRAY[v_next.holder_id];
                    END IF;
                    EXIT;
                END IF;
                v_capped := v_capped || v_next.semaphore_key;
            END LOOP;
        END IF;
    END IF;

    IF acquired THEN
        INSERT INTO distributed_locks AS l (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance,
                                            places, semaphore_key, turn)
        VALUES (v_prefix || p_holder_id, p_holder_id, pglock_next_token('distributed_locks_fencing_token_seq'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond', coalesce(p_metadata, '{}'), coalesce(p_instance, ''),
                p_places, p_key, v_turn)
        RETURNING l.lock_name, l.fencing_token, l.expires_at INTO lock_name, fencing_token, expires_at;
        IF v_seq IS NOT NULL THEN -- it was queued: its place goes
            DELETE FROM distributed_lock_waiters w WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
        END IF;
        holders := holders + p_places;
    ELSIF p_wait THEN
        INSERT INTO distributed_lock_waiters AS w (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at,
                                                   places, semaphore_key, turn)
        VALUES (v_queue, p_holder_id, coalesce(p_instance, ''), p_ttl_ms, coalesce(p_metadata, '{}'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond', p_places, p_key, v_turn)
        ON CONFLICT ON CONSTRAINT distributed_lock_waiters_pkey
        DO UPDATE SET expires_at = excluded.expires_at, places = excluded.places, semaphore_key = excluded.semaphore_key;
        queued := v_seq IS NULL;
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_semaphore_take(varchar, varchar, integer, integer, varchar, integer, bigint, jsonb, varchar, boolean) FROM PUBLIC;

-- pglock_semaphore_take of one place, with no key or cap: the attempt of v0.1.0, whose callers'
-- grants stand. holders is the places held.
CREATE OR REPLACE FUNCTION pglock_semaphore_attempt(p_name varchar, p_holder_id varchar, p_permits integer, p_ttl_ms bigint,
                                         p_metadata jsonb, p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, queued boolean, lock_name varchar, fencing_token bigint, expires_at timestamptz,
               holders integer)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT t.acquired, t.queued, t.lock_name, t.fencing_token, t.expires_at, t.holders
      FROM pglock_semaphore_take(p_name, p_holder_id, 1, p_permits, '', NULL, p_ttl_ms, p_metadata, p_instance, p_wait) AS t
$$;

REVOKE ALL ON FUNCTION pglock_semaphore_attempt(varchar, varchar, integer, bigint, jsonb, varchar, boolean) FROM PUBLIC;
