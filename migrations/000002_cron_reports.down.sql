-- Reverts 000002: the instances' clocks go, pglock_cron_claim's old signature gets 000001's
-- body back, and the overload that reports is dropped.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_cron_seen(varchar[], varchar, bigint, bigint);
DROP TABLE pglock_instances;

CREATE OR REPLACE FUNCTION pglock_cron_claim(p_instance varchar, p_names varchar[], p_seen timestamptz[],
    p_until timestamptz[], p_ttl_ms bigint[], p_tick_names varchar[], p_tick_times timestamptz[],
    p_tick_kinds text[], p_missed_until timestamptz[], p_missed_counts bigint[])
RETURNS SETOF pglock_cron_claimed
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz;
    v_s pglock_cron_schedules;
    v_running integer;
    v_buffered boolean;
    v_catching_up boolean;
    v_run pglock_cron_runs;
    e record;
    t record;
    c bigint;
BEGIN
    PERFORM pglock_cron_check('-', p_instance);
    IF cardinality(p_names) IS DISTINCT FROM cardinality(p_seen) OR cardinality(p_names) IS DISTINCT FROM cardinality(p_until)
       OR cardinality(p_names) IS DISTINCT FROM cardinality(p_ttl_ms) THEN
        RAISE EXCEPTION 'p_names, p_seen, p_until, p_ttl_ms: must have the same length' USING ERRCODE = '22023', COLUMN = 'p_names';
    END IF;
    IF cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_tick_times) OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_tick_kinds)
       OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_missed_until)
       OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_missed_counts) THEN
        RAISE EXCEPTION 'p_tick_*, p_missed_*: must have the same length' USING ERRCODE = '22023', COLUMN = 'p_tick_names';
    END IF;

    -- Each schedule with its ticks (grouped once: a hash join, not a scan of every tick per
    -- schedule), in name order.
    FOR e IN SELECT u.name, u.seen, u.until, u.ttl, g.ticks, g.kinds, g.missed_untils, g.missed_counts
               FROM unnest(p_names, p_seen, p_until, p_ttl_ms) AS u(name, seen, until, ttl)
               LEFT JOIN (SELECT x.name, array_agg(x.tick ORDER BY x.tick) AS ticks, array_agg(x.kind ORDER BY x.tick) AS kinds,
                                 array_agg(x.missed_until ORDER BY x.tick) AS missed_untils,
                                 array_agg(x.missed_count ORDER BY x.tick) AS missed_counts
                            FROM unnest(p_tick_names, p_tick_times, p_tick_kinds, p_missed_until, p_missed_counts)
                                 AS x(name, tick, kind, missed_until, missed_count)
                           GROUP BY x.name) AS g ON g.name = u.name
              WHERE u.until IS DISTINCT FROM u.seen
                 OR EXISTS (SELECT FROM pglock_cron_runs r WHERE r.schedule = u.name AND r.status = 'pending')
              ORDER BY u.name
    LOOP
        IF pglock_ttl_ok(e.ttl) IS NOT TRUE THEN
            PERFORM pglock_raise_bad_ttl(e.ttl, 'p_ttl_ms');
        END IF;
        SELECT * INTO v_s FROM pglock_cron_schedules WHERE name = e.name FOR NO KEY UPDATE;
        v_now := clock_timestamp();
        IF NOT FOUND THEN
            RETURN NEXT ROW('unknown', e.name, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v_now)::pglock_cron_claimed;
            CONTINUE;
        END IF;
        -- Runs whose instance stopped renewing are over.
        UPDATE pglock_cron_runs
           SET status = 'abandoned', finished_at = lease_expires_at,
               error = 'its instance (' || instance || ') stopped renewing its lease'
         WHERE schedule = e.name AND status = 'running' AND lease_expires_at < v_now;
        SELECT count(*) INTO v_running FROM pglock_cron_runs WHERE schedule = e.name AND status = 'running';

        IF e.until IS DISTINCT FROM e.seen THEN
            IF v_s.accounted_until IS DISTINCT FROM e.seen THEN
                RETURN NEXT ROW('stale', e.name, NULL, NULL, NULL, NULL, NULL, NULL, v_s.accounted_until, v_now)::pglock_cron_claimed;
                CONTINUE;
            END IF;
            IF e.until > v_now THEN
                RETURN NEXT ROW('early', e.name, NULL, NULL, NULL, NULL, NULL, NULL, v_s.accounted_until, v_now)::pglock_cron_claimed;
                CONTINUE;
            END IF;
            IF e.until < e.seen THEN
                RAISE EXCEPTION 'p_until: % is before the watermark of %', e.until, e.name USING ERRCODE = '22023', COLUMN = 'p_until';
            END IF;
            v_buffered := EXISTS (SELECT FROM pglock_cron_runs
                                   WHERE schedule = e.name AND status = 'pending' AND kind = 'scheduled');
            -- Caught-up ticks run in tick order: a tick that comes while some wait queues behind them.
            v_catching_up := EXISTS (SELECT FROM pglock_cron_runs
                                      WHERE schedule = e.name AND status = 'pending' AND kind = 'catch_up');
            FOR t IN SELECT u.tick, u.kind, u.missed_until, u.missed_count
                       FROM unnest(e.ticks, e.kinds, e.missed_untils, e.missed_counts) AS u(tick, kind, missed_until, missed_count)
            LOOP
                IF t.tick IS NULL OR t.tick <= e.seen OR t.tick > e.until THEN
                    RAISE EXCEPTION 'p_tick_times: the ticks of % must be after its watermark and at most p_until', e.name
                        USING ERRCODE = '22023', COLUMN = 'p_tick_times';
                END IF;
                IF t.kind = 'missed' THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, missed_until, missed_count,
                                                  created_at, finished_at, error)
                    VALUES (e.name, t.tick, 'scheduled', 'missed', 0, coalesce(t.missed_until, t.tick), CASE WHEN t.missed_count >= 0 THEN t.missed_count END,
                            v_now, v_now, 'no instance ran it in time');
                ELSIF t.kind NOT IN ('scheduled', 'catch_up') THEN
                    RAISE EXCEPTION 'p_tick_kinds: must be scheduled, catch_up or missed' USING ERRCODE = '22023', COLUMN = 'p_tick_kinds';
                ELSIF v_s.paused THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at, finished_at, error)
                    VALUES (e.name, t.tick, t.kind, 'skipped', 0, v_now, v_now, 'paused: ' || coalesce(v_s.pause_note, ''));
                ELSIF t.kind = 'catch_up' OR v_catching_up THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
                    VALUES (e.name, t.tick, t.kind, 'pending', 1, v_now);
                    v_catching_up := true;
                ELSIF v_running = 0 OR v_s.overlap = 'allow' THEN
                    RETURN NEXT pglock_cron_start(e.name, NULL, t.tick, 'scheduled', p_instance, e.ttl, v_now);
                    v_running := v_running + 1;
                ELSIF v_s.overlap = 'replace' THEN
                    FOR c IN UPDATE pglock_cron_runs
                                SET status = 'canceled', finished_at = v_now,
                                    error = 'replaced by the run of ' || t.tick::text
                              WHERE schedule = e.name AND status = 'running'
                          RETURNING id
                    LOOP
                        PERFORM pg_notify('pglock_cron', json_build_object('op', 'cancel', 'schedule', e.name, 'run', c)::text);
                    END LOOP;
                    RETURN NEXT pglock_cron_start(e.name, NULL, t.tick, 'scheduled', p_instance, e.ttl, v_now);
                    v_running := 1;
                ELSIF v_s.overlap = 'buffer_one' AND NOT v_buffered THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
                    VALUES (e.name, t.tick, 'scheduled', 'pending', 1, v_now);
                    v_buffered := true;
                ELSE
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at, finished_at, error)
                    VALUES (e.name, t.tick, 'scheduled', 'skipped', 0, v_now, v_now,
                            CASE WHEN v_s.overlap = 'buffer_one' THEN 'a run was running and another was buffered'
                                 ELSE 'a run was running' END);
                END IF;
            END LOOP;
            UPDATE pglock_cron_schedules SET accounted_until = e.until WHERE name = e.name;
        END IF;

        -- Pending runs start oldest first, one at a time unless the schedule allows overlap.
        LOOP
            EXIT WHEN v_running > 0 AND v_s.overlap <> 'allow';
            SELECT * INTO v_run FROM pglock_cron_runs
             WHERE schedule = e.name AND status = 'pending' ORDER BY id LIMIT 1;
            EXIT WHEN NOT FOUND;
            IF v_s.paused AND v_run.kind IN ('scheduled', 'catch_up') THEN
                UPDATE pglock_cron_runs SET status = 'skipped', attempt = 0, finished_at = v_now,
                       error = 'paused: ' || coalesce(v_s.pause_note, '')
                 WHERE id = v_run.id;
                CONTINUE;
            END IF;
            RETURN NEXT pglock_cron_start(e.name, v_run.id, NULL, NULL, p_instance, e.ttl, v_now);
            v_running := v_running + 1;
        END LOOP;
    END LOOP;

    -- Every other schedule's runs whose instance stopped renewing, last and without waiting for a
    -- row another claim holds: a claim that waited here while holding schedule locks could
    -- deadlock with one that holds such a row and waits for a schedule.
    UPDATE pglock_cron_runs r
       SET status = 'abandoned', finished_at = r.lease_expires_at,
           error = 'its instance (' || r.instance || ') stopped renewing its lease'
     WHERE r.id IN (SELECT x.id FROM pglock_cron_runs x
                     WHERE x.status = 'running' AND x.lease_expires_at < clock_timestamp()
                       FOR UPDATE SKIP LOCKED);
END;
$$;

DROP FUNCTION pglock_cron_claim(varchar, varchar[], timestamptz[], timestamptz[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[], boolean);
DROP FUNCTION pglock_cron_recorded(pglock_cron_runs, timestamptz);

COMMIT;
