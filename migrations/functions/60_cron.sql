-- Cron: schedules whose every tick runs once across instances, with no leader.

CREATE OR REPLACE FUNCTION pglock_cron_check(p_name varchar, p_instance varchar)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_name IS NULL OR octet_length(p_name) < 1 OR length(p_name) > 255 THEN
        RAISE EXCEPTION 'p_name: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_name';
    END IF;
    IF p_instance IS NULL OR octet_length(p_instance) < 1 OR length(p_instance) > 255 THEN
        RAISE EXCEPTION 'p_instance: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_instance';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_check(varchar, varchar) FROM PUBLIC;

-- Checks a schedule's definition, as pglock_cron_register_extras and pglock_cron_define take it
-- (the spec itself is parsed by the instances; pglockctl and the Go API check it first).
CREATE OR REPLACE FUNCTION pglock_cron_check_definition(p_spec text, p_time_zone text, p_overlap text, p_catch_up text,
    p_catch_up_window_ms bigint, p_keep_for_ms bigint, p_keep_runs integer, p_jitter_ms bigint,
    p_starts_at timestamptz, p_ends_at timestamptz, p_run_limit integer, p_pause_after_failures integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_spec IS NULL OR octet_length(p_spec) NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'p_spec: must be 1 to 1024 bytes' USING ERRCODE = '22023', COLUMN = 'p_spec';
    END IF;
    IF p_time_zone IS NULL OR octet_length(p_time_zone) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'p_time_zone: must be 1 to 255 bytes' USING ERRCODE = '22023', COLUMN = 'p_time_zone';
    END IF;
    IF p_overlap IS NULL OR p_overlap NOT IN ('skip', 'buffer_one', 'allow', 'replace') THEN
        RAISE EXCEPTION 'p_overlap: must be skip, buffer_one, allow or replace' USING ERRCODE = '22023', COLUMN = 'p_overlap';
    END IF;
    IF p_catch_up IS NULL OR p_catch_up NOT IN ('skip', 'latest', 'all') THEN
        RAISE EXCEPTION 'p_catch_up: must be skip, latest or all' USING ERRCODE = '22023', COLUMN = 'p_catch_up';
    END IF;
    IF p_catch_up_window_ms IS NULL OR p_catch_up_window_ms < 1 THEN
        RAISE EXCEPTION 'p_catch_up_window_ms: must be positive' USING ERRCODE = '22023', COLUMN = 'p_catch_up_window_ms';
    END IF;
    IF p_keep_for_ms IS NULL OR p_keep_for_ms < 1 THEN
        RAISE EXCEPTION 'p_keep_for_ms: must be positive' USING ERRCODE = '22023', COLUMN = 'p_keep_for_ms';
    END IF;
    IF p_keep_runs IS NULL OR p_keep_runs < 1 THEN
        RAISE EXCEPTION 'p_keep_runs: must be positive' USING ERRCODE = '22023', COLUMN = 'p_keep_runs';
    END IF;
    IF p_jitter_ms IS NULL OR p_jitter_ms < 0 THEN
        RAISE EXCEPTION 'p_jitter_ms: must not be negative' USING ERRCODE = '22023', COLUMN = 'p_jitter_ms';
    END IF;
    IF p_ends_at <= p_starts_at THEN
        RAISE EXCEPTION 'p_ends_at: must be after p_starts_at' USING ERRCODE = '22023', COLUMN = 'p_ends_at';
    END IF;
    IF p_run_limit < 1 THEN
        RAISE EXCEPTION 'p_run_limit: must be positive, or NULL for no limit' USING ERRCODE = '22023', COLUMN = 'p_run_limit';
    END IF;
    IF p_pause_after_failures < 1 THEN
        RAISE EXCEPTION 'p_pause_after_failures: must be positive, or NULL for never' USING ERRCODE = '22023',
            COLUMN = 'p_pause_after_failures';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_check_definition(text, text, text, text, bigint, bigint, integer, bigint, timestamptz,
    timestamptz, integer, integer) FROM PUBLIC;

-- Registers a schedule defined in an instance's code, or updates it (a new spec or policy from
-- a new deployment), keeping its watermark, pause and counts; answers the watermark. A new
-- schedule's watermark is now: a schedule has no ticks before it existed. A name a runtime
-- schedule has is refused (SQLSTATE 23505). What schedulers call since v0.1.0.
CREATE OR REPLACE FUNCTION pglock_cron_register_extras(p_name varchar, p_spec text, p_time_zone text, p_overlap text,
    p_catch_up text, p_catch_up_window_ms bigint, p_keep_for_ms bigint, p_keep_runs integer, p_instance varchar,
    p_jitter_ms bigint, p_starts_at timestamptz, p_ends_at timestamptz, p_run_limit integer, p_pause_after_failures integer)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz;
BEGIN
    PERFORM pglock_cron_check(p_name, p_instance);
    PERFORM pglock_cron_check_definition(p_spec, p_time_zone, p_overlap, p_catch_up, p_catch_up_window_ms, p_keep_for_ms,
        p_keep_runs, p_jitter_ms, p_starts_at, p_ends_at, p_run_limit, p_pause_after_failures);
    INSERT INTO pglock_cron_schedules AS s (name, spec, time_zone, overlap, catch_up, catch_up_window_ms,
                                            keep_for_ms, keep_runs, jitter_ms, starts_at, ends_at, run_limit,
                                            pause_after_failures, accounted_until, last_instance, last_seen_at, created_at)
    VALUES (p_name, p_spec, p_time_zone, p_overlap, p_catch_up, p_catch_up_window_ms, p_keep_for_ms, p_keep_runs,
            p_jitter_ms, p_starts_at, p_ends_at, p_run_limit, p_pause_after_failures, v_now, p_instance, v_now, v_now)
    ON CONFLICT (name) DO UPDATE
       SET spec = excluded.spec, time_zone = excluded.time_zone, overlap = excluded.overlap,
           catch_up = excluded.catch_up, catch_up_window_ms = excluded.catch_up_window_ms,
           keep_for_ms = excluded.keep_for_ms, keep_runs = excluded.keep_runs, jitter_ms = excluded.jitter_ms,
           starts_at = excluded.starts_at, ends_at = excluded.ends_at, run_limit = excluded.run_limit,
           pause_after_failures = excluded.pause_after_failures,
           last_instance = excluded.last_instance, last_seen_at = excluded.last_seen_at
     WHERE s.kind IS NULL
    RETURNING s.accounted_until INTO v_until;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % was defined at runtime: a schedule in code needs another name', p_name
            USING ERRCODE = '23505', CONSTRAINT = 'pglock_cron_schedules_pkey';
    END IF;
    RETURN v_until;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_register_extras(varchar, text, text, text, text, bigint, bigint, integer, varchar,
    bigint, timestamptz, timestamptz, integer, integer) FROM PUBLIC;

-- What v0.1.0's schedulers call: a schedule without the extras, which keeps those a newer
-- instance gave it (old and new instances side by side in a rolling deploy do not undo them).
CREATE OR REPLACE FUNCTION pglock_cron_register(p_name varchar, p_spec text, p_time_zone text, p_overlap text,
    p_catch_up text, p_catch_up_window_ms bigint, p_keep_for_ms bigint, p_keep_runs integer, p_instance varchar)
RETURNS timestamptz
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT pglock_cron_register_extras(p_name, p_spec, p_time_zone, p_overlap, p_catch_up, p_catch_up_window_ms,
                                       p_keep_for_ms, p_keep_runs, p_instance, coalesce(s.jitter_ms, 0), s.starts_at,
                                       s.ends_at, s.run_limit, s.pause_after_failures)
      FROM (SELECT) AS one
      LEFT JOIN pglock_cron_schedules s ON s.name = p_name
$$;

REVOKE ALL ON FUNCTION pglock_cron_register(varchar, text, text, text, text, bigint, bigint, integer, varchar) FROM PUBLIC;

-- Defines a schedule at runtime (p_replace false: the name must be free) or replaces the
-- definition of one (p_replace true: a runtime schedule of that name must exist), recording who
-- did it and why in pglock_cron_changes; answers the definition's revision. Its ticks are run by
-- the instances that handle p_kind. A new spec or zone takes effect from now on: ticks of the
-- old spec not yet claimed are not run. Another change keeps the watermark, so the tick in
-- flight runs once, as the new definition says. Claims refuse an instance that planned with an
-- older revision, so no tick of a replaced definition starts once this commits.
CREATE OR REPLACE FUNCTION pglock_cron_define(p_name varchar, p_kind varchar, p_spec text, p_time_zone text, p_args jsonb,
    p_overlap text, p_catch_up text, p_catch_up_window_ms bigint, p_keep_for_ms bigint, p_keep_runs integer,
    p_ttl_ms bigint, p_timeout_ms bigint, p_jitter_ms bigint, p_starts_at timestamptz, p_ends_at timestamptz,
    p_run_limit integer, p_pause_after_failures integer, p_replace boolean, p_by text, p_note text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_s pglock_cron_schedules;
    v_new_spec boolean;
BEGIN
    PERFORM pglock_cron_check(p_name, '-');
    IF p_kind IS NULL OR octet_length(p_kind) < 1 OR length(p_kind) > 255 THEN
        RAISE EXCEPTION 'p_kind: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_kind';
    END IF;
    PERFORM pglock_cron_check_definition(p_spec, p_time_zone, p_overlap, p_catch_up, p_catch_up_window_ms, p_keep_for_ms,
        p_keep_runs, p_jitter_ms, p_starts_at, p_ends_at, p_run_limit, p_pause_after_failures);
    BEGIN
        PERFORM v_now AT TIME ZONE p_time_zone;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'p_time_zone: % is not a time zone', p_time_zone USING ERRCODE = '22023', COLUMN = 'p_time_zone';
    END;
    -- jsonb's text form spaces what it separates: this bound leaves room for every 64 KiB of JSON.
    IF octet_length(p_args::text) > 131072 THEN
        RAISE EXCEPTION 'p_args: at most 131072 bytes of JSON' USING ERRCODE = '22023', COLUMN = 'p_args';
    END IF;
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_timeout_ms IS NULL OR p_timeout_ms < 0 THEN
        RAISE EXCEPTION 'p_timeout_ms: must not be negative (0: no timeout)' USING ERRCODE = '22023', COLUMN = 'p_timeout_ms';
    END IF;
    IF p_replace IS NULL THEN
        RAISE EXCEPTION 'p_replace: must be true or false' USING ERRCODE = '22023', COLUMN = 'p_replace';
    END IF;
    IF p_replace THEN
        v_s := pglock_cron_lock(p_name);
        IF v_s.kind IS NULL THEN
            RAISE EXCEPTION 'schedule % is defined in code: change it there', p_name
                USING ERRCODE = '55000', CONSTRAINT = 'pglock_cron_defined_in_code';
        END IF;
        v_new_spec := (v_s.spec, v_s.time_zone) IS DISTINCT FROM (p_spec, p_time_zone);
        UPDATE pglock_cron_schedules
           SET kind = p_kind, spec = p_spec, time_zone = p_time_zone, args = p_args, overlap = p_overlap,
               catch_up = p_catch_up, catch_up_window_ms = p_catch_up_window_ms, keep_for_ms = p_keep_for_ms,
               keep_runs = p_keep_runs, ttl_ms = p_ttl_ms, timeout_ms = p_timeout_ms, jitter_ms = p_jitter_ms,
               starts_at = p_starts_at, ends_at = p_ends_at, run_limit = p_run_limit,
               pause_after_failures = p_pause_after_failures, revision = nextval('pglock_cron_revision_seq'),
               defined_at = v_now,
               accounted_until = CASE WHEN v_new_spec THEN greatest(accounted_until, v_now) ELSE accounted_until END,
               -- Another kind: no instance has handled it yet.
               last_instance = CASE WHEN kind = p_kind THEN last_instance END,
               last_seen_at = CASE WHEN kind = p_kind THEN last_seen_at END
         WHERE name = p_name
        RETURNING * INTO v_s;
        IF v_new_spec THEN -- the old spec's ticks waiting their turn do not run
            UPDATE pglock_cron_runs
               SET status = 'skipped', attempt = 0, finished_at = v_now,
                   error = format('its schedule was given another spec (revision %s)', v_s.revision)
             WHERE schedule = p_name AND status = 'pending' AND kind IN ('scheduled', 'catch_up');
        END IF;
    ELSE
        INSERT INTO pglock_cron_schedules (name, kind, spec, time_zone, args, overlap, catch_up, catch_up_window_ms,
                                           keep_for_ms, keep_runs, ttl_ms, timeout_ms, jitter_ms, starts_at, ends_at,
                                           run_limit, pause_after_failures, accounted_until, defined_at, created_at)
        VALUES (p_name, p_kind, p_spec, p_time_zone, p_args, p_overlap, p_catch_up, p_catch_up_window_ms, p_keep_for_ms,
                p_keep_runs, p_ttl_ms, p_timeout_ms, p_jitter_ms, p_starts_at, p_ends_at, p_run_limit,
                p_pause_after_failures, v_now, v_now, v_now)
        ON CONFLICT (name) DO NOTHING
        RETURNING * INTO v_s;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'schedule % exists', p_name USING ERRCODE = '23505', CONSTRAINT = 'pglock_cron_schedules_pkey';
        END IF;
    END IF;
    INSERT INTO pglock_cron_changes (schedule, op, definition, changed_by, note, changed_at)
    VALUES (p_name, CASE WHEN p_replace THEN 'update' ELSE 'define' END,
            jsonb_build_object('kind', p_kind, 'spec', p_spec, 'time_zone', p_time_zone, 'args', p_args,
                               'overlap', p_overlap, 'catch_up', p_catch_up, 'catch_up_window_ms', p_catch_up_window_ms,
                               'keep_for_ms', p_keep_for_ms, 'keep_runs', p_keep_runs, 'ttl_ms', p_ttl_ms,
                               'timeout_ms', p_timeout_ms, 'jitter_ms', p_jitter_ms, 'starts_at', p_starts_at,
                               'ends_at', p_ends_at, 'run_limit', p_run_limit,
                               'pause_after_failures', p_pause_after_failures, 'revision', v_s.revision),
            p_by, p_note, v_now);
    PERFORM pg_notify('pglock_cron', json_build_object('op', CASE WHEN p_replace THEN 'update' ELSE 'define' END,
                                                       'schedule', p_name, 'kind', p_kind)::text);
    RETURN v_s.revision;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_define(varchar, varchar, text, text, jsonb, text, text, bigint, bigint, integer, bigint,
    bigint, bigint, timestamptz, timestamptz, integer, integer, boolean, text, text) FROM PUBLIC;

-- Deletes a runtime schedule and its runs: once this commits, no instance starts a tick of it
-- (a claim refuses a schedule it cannot find), and a run under way loses its lease.
CREATE OR REPLACE FUNCTION pglock_cron_delete(p_name varchar, p_by text, p_note text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_s pglock_cron_schedules;
BEGIN
    v_s := pglock_cron_lock(p_name);
    IF v_s.kind IS NULL THEN
        RAISE EXCEPTION 'schedule % is defined in code: remove it there', p_name
            USING ERRCODE = '55000', CONSTRAINT = 'pglock_cron_defined_in_code';
    END IF;
    DELETE FROM pglock_cron_schedules WHERE name = p_name;
    INSERT INTO pglock_cron_changes (schedule, op, changed_by, note, changed_at)
    VALUES (p_name, 'delete', p_by, p_note, clock_timestamp());
    PERFORM pg_notify('pglock_cron', json_build_object('op', 'delete', 'schedule', p_name, 'kind', v_s.kind)::text);
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_delete(varchar, text, text) FROM PUBLIC;

-- Records that an instance still has these schedules; answers those it named that do not
-- exist (an operator deleted them: the instance registers them again). A schedule whose row
-- another transaction holds (a claim) is skipped, not waited for: a claim holds several rows,
-- and this record can wait for the next time.
CREATE OR REPLACE FUNCTION pglock_cron_seen(p_names varchar[], p_instance varchar)
RETURNS SETOF varchar
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_cron_check('-', p_instance);
    UPDATE pglock_cron_schedules s SET last_instance = p_instance, last_seen_at = clock_timestamp()
      FROM (SELECT name FROM pglock_cron_schedules WHERE name = ANY (p_names)
             ORDER BY name FOR NO KEY UPDATE SKIP LOCKED) AS free
     WHERE s.name = free.name;
    RETURN QUERY SELECT n FROM unnest(p_names) AS n
                  WHERE NOT EXISTS (SELECT FROM pglock_cron_schedules WHERE name = n);
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_seen(varchar[], varchar) FROM PUBLIC;

-- As pglock_cron_seen, and records the instance's clock offset in pglock_instances: what
-- schedulers call since v0.1.0.
CREATE OR REPLACE FUNCTION pglock_cron_seen_clock(p_names varchar[], p_instance varchar, p_offset_us bigint, p_uncertainty_us bigint)
RETURNS SETOF varchar
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_offset_us IS NULL OR p_uncertainty_us IS NULL OR p_uncertainty_us < 0 THEN
        RAISE EXCEPTION 'p_offset_us, p_uncertainty_us: an offset and a non-negative uncertainty are required'
            USING ERRCODE = '22023', COLUMN = 'p_offset_us';
    END IF;
    RETURN QUERY SELECT * FROM pglock_cron_seen(p_names, p_instance); -- checks the instance
    INSERT INTO pglock_instances AS i (instance, clock_offset_us, uncertainty_us, seen_at)
    VALUES (p_instance, p_offset_us, p_uncertainty_us, clock_timestamp())
    ON CONFLICT (instance) DO UPDATE
        SET clock_offset_us = excluded.clock_offset_us, uncertainty_us = excluded.uncertainty_us,
            seen_at = excluded.seen_at;
    DELETE FROM pglock_instances WHERE seen_at < clock_timestamp() - interval '1 day';
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_seen_clock(varchar[], varchar, bigint, bigint) FROM PUBLIC;

-- Starts a run: a new row, or a pending one (p_id), under a new token and lease.
CREATE OR REPLACE FUNCTION pglock_cron_start(p_schedule varchar, p_id bigint, p_time timestamptz, p_kind text,
    p_instance varchar, p_ttl_ms bigint, p_now timestamptz)
RETURNS pglock_cron_claimed
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    r pglock_cron_runs;
BEGIN
    IF p_id IS NULL THEN
        INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, instance, fencing_token,
                                      lease_expires_at, created_at, started_at)
        VALUES (p_schedule, p_time, p_kind, 'running', 1, p_instance, pglock_next_token('pglock_cron_runs_fencing_token_seq'),
                p_now + p_ttl_ms * interval '1 millisecond', p_now, p_now)
        RETURNING * INTO r;
    ELSE
        UPDATE pglock_cron_runs
           SET status = 'running', instance = p_instance, fencing_token = pglock_next_token('pglock_cron_runs_fencing_token_seq'),
               lease_expires_at = p_now + p_ttl_ms * interval '1 millisecond', started_at = p_now
         WHERE id = p_id
        RETURNING * INTO r;
    END IF;
    RETURN ROW('run', r.schedule, r.id, r.scheduled_time, r.kind, r.attempt, r.fencing_token,
               r.lease_expires_at, NULL, p_now)::pglock_cron_claimed;
END;
$$;

-- A run the claim recorded, as a claim's answer: its status is the outcome ('skipped',
-- 'abandoned').
CREATE OR REPLACE FUNCTION pglock_cron_recorded(r pglock_cron_runs, p_now timestamptz)
RETURNS pglock_cron_claimed
LANGUAGE sql IMMUTABLE
SET search_path FROM CURRENT
AS $$
    SELECT ROW(r.status, r.schedule, r.id, r.scheduled_time, r.kind, r.attempt, r.fencing_token,
               r.lease_expires_at, NULL, p_now)::pglock_cron_claimed
$$;

REVOKE ALL ON FUNCTION pglock_cron_recorded(pglock_cron_runs, timestamptz) FROM PUBLIC;

-- Accounts for an instance's due ticks and starts what may start, in one statement.
--   p_names, p_seen, p_until, p_ttl_ms, p_revisions: per schedule, the watermark the instance
--     read, the one its ticks bring it to (equal: no ticks, only pending runs to start), its run
--     lease, and the revision of the runtime definition it planned with (0: defined in its code);
--   p_tick_*: per tick, its schedule and time, and what it is: 'scheduled' (on time: runs now,
--     as the overlap policy says), 'catch_up' (missed, to run in turn) or 'missed' (recorded,
--     with p_missed_until and p_missed_count the range it stands for: the last tick and how many,
--     a negative count meaning too many to count).
-- A schedule whose definition is not the one planned with is answered 'changed', and nothing of
-- it is claimed. One whose run limit is reached is answered 'finished': its ticks are not run
-- (nor recorded), and its buffered or caught-up runs are recorded skipped.
-- Returns the runs it starts and, with p_report, a row per run it records skipped (paused, or
-- by the overlap policy) or abandoned (its lease expired), each told once, by the instance whose
-- claim recorded it, so that a sum of its metrics over instances is exact
-- (pglock_cron_recorded). Missed ticks need no report: the claiming instance planned them.
-- Schedules' rows are locked in name order, and nothing else a claim locks is waited for while
-- it holds one that another claim could want first, so claims never deadlock.
CREATE OR REPLACE FUNCTION pglock_cron_claim_reporting(p_instance varchar, p_names varchar[], p_seen timestamptz[],
    p_until timestamptz[], p_ttl_ms bigint[], p_revisions bigint[], p_tick_names varchar[], p_tick_times timestamptz[],
    p_tick_kinds text[], p_missed_until timestamptz[], p_missed_counts bigint[], p_report boolean)
RETURNS SETOF pglock_cron_claimed
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
-- Its statements' plans are cached for the session and made from statistics that may say a
-- table is empty: the rows it joins by primary key are found by it, never by a scan apiece.
SET enable_seqscan = off
AS $$
DECLARE
    v_now timestamptz;
    v_s pglock_cron_schedules;
    v_running integer;
    v_pending integer;
    v_expired boolean;
    v_buffered boolean;
    v_catching_up boolean;
    v_counted integer; -- runs of its ticks this claim started
    -- The runs of ticks to start, and the watermarks to move, written together after the loop:
    -- one statement each, not one per schedule (a minute boundary can make ten thousand).
    v_start_names varchar[] := '{}';
    v_start_ticks timestamptz[] := '{}';
    v_start_ttls bigint[] := '{}';
    v_start_nows timestamptz[] := '{}';
    v_moved_names varchar[] := '{}';
    v_moved_untils timestamptz[] := '{}';
    v_run pglock_cron_runs;
    v_rec pglock_cron_runs;
    e record;
    t record;
    c bigint;
BEGIN
    PERFORM pglock_cron_check('-', p_instance);
    IF cardinality(p_names) IS DISTINCT FROM cardinality(p_seen) OR cardinality(p_names) IS DISTINCT FROM cardinality(p_until)
       OR cardinality(p_names) IS DISTINCT FROM cardinality(p_ttl_ms) OR cardinality(p_names) IS DISTINCT FROM cardinality(p_revisions) THEN
        RAISE EXCEPTION 'p_names, p_seen, p_until, p_ttl_ms, p_revisions: must have the same length' USING ERRCODE = '22023', COLUMN = 'p_names';
    END IF;
    IF cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_tick_times) OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_tick_kinds)
       OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_missed_until)
       OR cardinality(p_tick_names) IS DISTINCT FROM cardinality(p_missed_counts) THEN
        RAISE EXCEPTION 'p_tick_*, p_missed_*: must have the same length' USING ERRCODE = '22023', COLUMN = 'p_tick_names';
    END IF;

    -- Each schedule with its ticks (grouped once: a hash join, not a scan of every tick per
    -- schedule), in name order.
    FOR e IN SELECT u.name, u.seen, u.until, u.ttl, nullif(u.revision, 0) AS revision, g.ticks, g.kinds, g.missed_untils,
                    g.missed_counts
               FROM unnest(p_names, p_seen, p_until, p_ttl_ms, p_revisions) AS u(name, seen, until, ttl, revision)
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
        IF e.revision IS DISTINCT FROM (CASE WHEN v_s.kind IS NOT NULL THEN v_s.revision END) THEN
            RETURN NEXT ROW('changed', e.name, NULL, NULL, NULL, NULL, NULL, NULL, v_s.accounted_until, v_now)::pglock_cron_claimed;
            CONTINUE;
        END IF;
        -- Checked before anything is read of its runs: at a boundary where thousands are due, the
        -- instances that lose the race find them all stale, and should cost little.
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
        END IF;
        v_counted := 0;
        -- Its runs under way, in one read: a claim of thousands of schedules makes it for each.
        -- Caught-up ticks run in tick order: a tick that comes while some wait queues behind them.
        SELECT count(*) FILTER (WHERE status = 'running' AND lease_expires_at >= v_now), count(*) FILTER (WHERE status = 'pending'),
               coalesce(bool_or(status = 'running' AND lease_expires_at < v_now), false),
               coalesce(bool_or(status = 'pending' AND kind = 'scheduled'), false),
               coalesce(bool_or(status = 'pending' AND kind = 'catch_up'), false)
          INTO v_running, v_pending, v_expired, v_buffered, v_catching_up
          FROM pglock_cron_runs WHERE schedule = e.name AND status IN ('pending', 'running');
        IF v_expired THEN -- runs whose instance stopped renewing are over
            FOR v_rec IN UPDATE pglock_cron_runs
                            SET status = 'abandoned', finished_at = lease_expires_at,
                                error = 'its instance (' || instance || ') stopped renewing its lease'
                          WHERE schedule = e.name AND status = 'running' AND lease_expires_at < v_now
                      RETURNING *
            LOOP
                CONTINUE WHEN NOT p_report;
                RETURN NEXT pglock_cron_recorded(v_rec, v_now);
            END LOOP;
        END IF;

        IF e.until IS DISTINCT FROM e.seen THEN
            FOR t IN SELECT u.tick, u.kind, u.missed_until, u.missed_count
                       FROM unnest(e.ticks, e.kinds, e.missed_untils, e.missed_counts) AS u(tick, kind, missed_until, missed_count)
            LOOP
                IF t.tick IS NULL OR t.tick <= e.seen OR t.tick > e.until THEN
                    RAISE EXCEPTION 'p_tick_times: the ticks of % must be after its watermark and at most p_until', e.name
                        USING ERRCODE = '22023', COLUMN = 'p_tick_times';
                END IF;
                CONTINUE WHEN v_s.runs_started + v_counted >= v_s.run_limit; -- finished: no more ticks
                IF t.kind = 'missed' THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, missed_until, missed_count,
                                                  created_at, finished_at, error)
                    VALUES (e.name, t.tick, 'scheduled', 'missed', 0, coalesce(t.missed_until, t.tick), CASE WHEN t.missed_count >= 0 THEN t.missed_count END,
                            v_now, v_now, 'no instance ran it in time');
                ELSIF t.kind NOT IN ('scheduled', 'catch_up') THEN
                    RAISE EXCEPTION 'p_tick_kinds: must be scheduled, catch_up or missed' USING ERRCODE = '22023', COLUMN = 'p_tick_kinds';
                ELSIF v_s.paused THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at, finished_at, error)
                    VALUES (e.name, t.tick, t.kind, 'skipped', 0, v_now, v_now, 'paused: ' || coalesce(v_s.pause_note, ''))
                    RETURNING * INTO v_rec;
                    IF p_report THEN
                        RETURN NEXT pglock_cron_recorded(v_rec, v_now);
                    END IF;
                ELSIF t.kind = 'catch_up' OR v_catching_up THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
                    VALUES (e.name, t.tick, t.kind, 'pending', 1, v_now);
                    v_catching_up := true;
                    v_pending := v_pending + 1;
                ELSIF v_running = 0 OR v_s.overlap = 'allow' THEN
                    v_start_names := v_start_names || e.name;
                    v_start_ticks := v_start_ticks || t.tick;
                    v_start_ttls := v_start_ttls || e.ttl;
                    v_start_nows := v_start_nows || v_now;
                    v_running := v_running + 1;
                    v_counted := v_counted + 1;
                ELSIF v_s.overlap = 'replace' THEN
                    FOR c IN UPDATE pglock_cron_runs
                                SET status = 'canceled', finished_at = v_now,
                                    error = 'replaced by the run of ' || t.tick::text
                              WHERE schedule = e.name AND status = 'running'
                          RETURNING id
                    LOOP
                        PERFORM pg_notify('pglock_cron', json_build_object('op', 'cancel', 'schedule', e.name, 'run', c)::text);
                    END LOOP;
                    v_start_names := v_start_names || e.name;
                    v_start_ticks := v_start_ticks || t.tick;
                    v_start_ttls := v_start_ttls || e.ttl;
                    v_start_nows := v_start_nows || v_now;
                    v_running := 1;
                    v_counted := v_counted + 1;
                ELSIF v_s.overlap = 'buffer_one' AND NOT v_buffered THEN
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at)
                    VALUES (e.name, t.tick, 'scheduled', 'pending', 1, v_now);
                    v_buffered := true;
                    v_pending := v_pending + 1;
                ELSE
                    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, created_at, finished_at, error)
                    VALUES (e.name, t.tick, 'scheduled', 'skipped', 0, v_now, v_now,
                            CASE WHEN v_s.overlap = 'buffer_one' THEN 'a run was running and another was buffered'
                                 ELSE 'a run was running' END)
                    RETURNING * INTO v_rec;
                    IF p_report THEN
                        RETURN NEXT pglock_cron_recorded(v_rec, v_now);
                    END IF;
                END IF;
            END LOOP;
            v_moved_names := v_moved_names || e.name;
            v_moved_untils := v_moved_untils || e.until;
        END IF;

        -- Pending runs start oldest first, one at a time unless the schedule allows overlap.
        LOOP
            EXIT WHEN v_pending = 0 OR v_running > 0 AND v_s.overlap <> 'allow';
            SELECT * INTO v_run FROM pglock_cron_runs
             WHERE schedule = e.name AND status = 'pending' ORDER BY id LIMIT 1;
            EXIT WHEN NOT FOUND;
            IF v_run.kind IN ('scheduled', 'catch_up') AND (v_s.paused OR v_s.runs_started + v_counted >= v_s.run_limit) THEN
                UPDATE pglock_cron_runs SET status = 'skipped', attempt = 0, finished_at = v_now,
                       error = CASE WHEN v_s.paused THEN 'paused: ' || coalesce(v_s.pause_note, '')
                                    ELSE 'the schedule finished: its run limit was reached' END
                 WHERE id = v_run.id
                RETURNING * INTO v_rec;
                IF p_report THEN
                    RETURN NEXT pglock_cron_recorded(v_rec, v_now);
                END IF;
                CONTINUE;
            END IF;
            RETURN NEXT pglock_cron_start(e.name, v_run.id, NULL, NULL, p_instance, e.ttl, v_now);
            v_running := v_running + 1;
            IF v_run.kind IN ('scheduled', 'catch_up') THEN
                v_counted := v_counted + 1;
            END IF;
        END LOOP;
        IF v_counted > 0 AND v_s.run_limit IS NOT NULL THEN
            UPDATE pglock_cron_schedules SET runs_started = runs_started + v_counted WHERE name = e.name;
        END IF;
        IF v_s.runs_started + v_counted >= v_s.run_limit THEN
            RETURN NEXT ROW('finished', e.name, NULL, NULL, NULL, NULL, NULL, NULL, NULL, v_now)::pglock_cron_claimed;
        END IF;
    END LOOP;

    UPDATE pglock_cron_schedules s SET accounted_until = m.until
      FROM unnest(v_moved_names, v_moved_untils) AS m(name, until)
     WHERE s.name = m.name;
    RETURN QUERY
        WITH started AS (
            INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, instance, fencing_token,
                                          lease_expires_at, created_at, started_at)
            SELECT n.name, n.tick, 'scheduled', 'running', 1, p_instance, pglock_next_token('pglock_cron_runs_fencing_token_seq'),
                   n.now + n.ttl * interval '1 millisecond', n.now, n.now
              FROM unnest(v_start_names, v_start_ticks, v_start_ttls, v_start_nows) AS n(name, tick, ttl, now)
            RETURNING *
        )
        SELECT (ROW('run', r.schedule, r.id, r.scheduled_time, r.kind, r.attempt, r.fencing_token, r.lease_expires_at,
                    NULL, r.started_at)::pglock_cron_claimed).*
          FROM started r;

    -- Every other schedule's runs whose instance stopped renewing, last and without waiting for a
    -- row another claim holds: a claim that waited here while holding schedule locks could
    -- deadlock with one that holds such a row and waits for a schedule. Each is recorded by its
    -- id: one UPDATE joined to the locking read ran that read again for every run (a semi-join
    -- planned for a table its statistics said was empty), 9 s with ten thousand running.
    FOR c IN SELECT x.id FROM pglock_cron_runs x
              WHERE x.status = 'running' AND x.lease_expires_at < clock_timestamp()
                FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE pglock_cron_runs
           SET status = 'abandoned', finished_at = lease_expires_at,
               error = 'its instance (' || instance || ') stopped renewing its lease'
         WHERE id = c
        RETURNING * INTO v_rec;
        CONTINUE WHEN NOT p_report;
        RETURN NEXT pglock_cron_recorded(v_rec, clock_timestamp());
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_claim_reporting(varchar, varchar[], timestamptz[], timestamptz[], bigint[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[], boolean) FROM PUBLIC;

-- What v0.1.0's schedulers call: the claim without reports.
CREATE OR REPLACE FUNCTION pglock_cron_claim(p_instance varchar, p_names varchar[], p_seen timestamptz[],
    p_until timestamptz[], p_ttl_ms bigint[], p_tick_names varchar[], p_tick_times timestamptz[],
    p_tick_kinds text[], p_missed_until timestamptz[], p_missed_counts bigint[])
RETURNS SETOF pglock_cron_claimed
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    SELECT * FROM pglock_cron_claim_reporting(p_instance, p_names, p_seen, p_until, p_ttl_ms,
                                              array_fill(0::bigint, ARRAY[cardinality(p_names)]), p_tick_names,
                                              p_tick_times, p_tick_kinds, p_missed_until, p_missed_counts, false) AS c
     WHERE c.outcome IN ('run', 'stale', 'early', 'unknown') -- the answers v0.1.0 knows
$$;

-- Renews a run's lease; NULL once the run is no longer running under this token.
CREATE OR REPLACE FUNCTION pglock_cron_renew(p_id bigint, p_fencing_token bigint, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    UPDATE pglock_cron_runs
       SET lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE id = p_id AND fencing_token = p_fencing_token AND status = 'running'
       AND lease_expires_at > clock_timestamp()
    RETURNING lease_expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_renew(bigint, bigint, bigint) FROM PUBLIC;

-- Renews the leases of the cron runs (p_ids[i], p_fencing_tokens[i]) for p_ttl_ms[i] from now,
-- as pglock_cron_renew does one.
CREATE OR REPLACE FUNCTION pglock_cron_renew_many(p_ids bigint[], p_fencing_tokens bigint[], p_ttl_ms bigint[])
RETURNS TABLE (id bigint, fencing_token bigint, outcome text, lease_expires_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pglock_check_arrays(ARRAY['p_ids', 'p_fencing_tokens', 'p_ttl_ms'],
        ARRAY[cardinality(p_ids), cardinality(p_fencing_tokens), cardinality(p_ttl_ms)]);
    PERFORM pglock_check_ttls(p_ttl_ms);

    RETURN QUERY
        WITH wanted AS (
            SELECT r.r, r.f, r.t, r.o FROM unnest(p_ids, p_fencing_tokens, p_ttl_ms) WITH ORDINALITY AS r(r, f, t, o)
        ), mine AS (
            SELECT c.id, w.t FROM pglock_cron_runs c JOIN wanted w ON c.id = w.r
             WHERE c.fencing_token = w.f AND c.status = 'running' AND c.lease_expires_at > clock_timestamp()
               FOR UPDATE OF c SKIP LOCKED
        ), renewed AS (
            UPDATE pglock_cron_runs c
               SET lease_expires_at = clock_timestamp() + m.t * interval '1 millisecond'
              FROM mine m
             WHERE c.id = m.id
            RETURNING c.id, c.fencing_token, c.lease_expires_at
        )
        SELECT w.r, w.f,
               CASE WHEN x.lease_expires_at IS NOT NULL THEN 'renewed'
                    WHEN EXISTS (SELECT FROM pglock_cron_runs c WHERE c.id = w.r AND c.fencing_token = w.f
                                    AND c.status = 'running' AND c.lease_expires_at > clock_timestamp()) THEN 'busy'
                    ELSE 'gone' END,
               x.lease_expires_at
          FROM wanted w
          LEFT JOIN renewed x ON x.id = w.r AND x.fencing_token = w.f
         ORDER BY w.o;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_renew_many(bigint[], bigint[], bigint[]) FROM PUBLIC;

-- Records how a run ended: p_status 'ran', 'failed' or 'canceled'. Answers whether the schedule
-- has pending runs (the instance claims next at once), or NULL when the run was no longer
-- running under this token (it was abandoned or replaced, and that record stands). A failure
-- counts towards the schedule's failures in a row, which pause it at pause_after_failures (the
-- note says why); a run that ran clears the count.
CREATE OR REPLACE FUNCTION pglock_cron_finish(p_id bigint, p_fencing_token bigint, p_status text, p_error text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_s pglock_cron_schedules;
    v_pause boolean;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('ran', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'p_status: must be ran, failed or canceled' USING ERRCODE = '22023', COLUMN = 'p_status';
    END IF;
    SELECT s.* INTO v_s FROM pglock_cron_schedules s JOIN pglock_cron_runs r ON r.schedule = s.name WHERE r.id = p_id;
    IF p_status = 'failed' OR p_status = 'ran' AND v_s.failures_in_row > 0 THEN
        -- The schedule's row first, then the run's, as claims take them: the other order could
        -- deadlock with a claim recording this run abandoned.
        SELECT * INTO v_s FROM pglock_cron_schedules WHERE name = v_s.name FOR NO KEY UPDATE;
    END IF;
    UPDATE pglock_cron_runs
       SET status = p_status, finished_at = clock_timestamp(), lease_expires_at = NULL, error = p_error
     WHERE id = p_id AND fencing_token = p_fencing_token AND status = 'running';
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_status = 'failed' THEN
        v_pause := NOT v_s.paused AND v_s.failures_in_row + 1 >= coalesce(v_s.pause_after_failures, 0) AND v_s.pause_after_failures > 0;
        UPDATE pglock_cron_schedules
           SET failures_in_row = failures_in_row + 1
         WHERE name = v_s.name;
        IF v_pause THEN
            UPDATE pglock_cron_schedules
               SET paused = true, paused_by = 'pglock', paused_at = clock_timestamp(),
                   pause_note = format('paused after %s failed runs in a row; the last: %s', v_s.failures_in_row + 1,
                                       left(coalesce(p_error, ''), 1000))
             WHERE name = v_s.name;
            PERFORM pg_notify('pglock_cron', json_build_object('op', 'pause', 'schedule', v_s.name)::text);
        END IF;
    ELSIF p_status = 'ran' AND v_s.failures_in_row > 0 THEN
        UPDATE pglock_cron_schedules SET failures_in_row = 0 WHERE name = v_s.name;
    END IF;
    RETURN EXISTS (SELECT FROM pglock_cron_runs WHERE schedule = v_s.name AND status = 'pending');
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_finish(bigint, bigint, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION pglock_cron_lock(p_name varchar)
RETURNS pglock_cron_schedules
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_s pglock_cron_schedules;
BEGIN
    SELECT * INTO v_s FROM pglock_cron_schedules WHERE name = p_name FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'schedule % does not exist', p_name USING ERRCODE = 'P0002', COLUMN = 'p_name';
    END IF;
    RETURN v_s;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_lock(varchar) FROM PUBLIC;

-- Pauses a schedule: from the next tick on, no instance starts its ticks (they are recorded
-- skipped). Manual and backfilled runs still run.
CREATE OR REPLACE FUNCTION pglock_cron_pause(p_name varchar, p_note text, p_by text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_cron_lock(p_name);
    UPDATE pglock_cron_schedules SET paused = true, pause_note = p_note, paused_by = p_by, paused_at = clock_timestamp()
     WHERE name = p_name;
    PERFORM pg_notify('pglock_cron', json_build_object('op', 'pause', 'schedule', p_name)::text);
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_pause(varchar, text, text) FROM PUBLIC;

-- Resumes a schedule, and clears its count of failures in a row. Ticks that came while it was
-- paused stay skipped.
CREATE OR REPLACE FUNCTION pglock_cron_resume(p_name varchar)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_cron_lock(p_name);
    UPDATE pglock_cron_schedules SET paused = false, pause_note = NULL, paused_by = NULL, paused_at = NULL, failures_in_row = 0
     WHERE name = p_name;
    PERFORM pg_notify('pglock_cron', json_build_object('op', 'resume', 'schedule', p_name)::text);
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_resume(varchar) FROM PUBLIC;

-- Asks for a manual run, pending until an instance with the schedule starts it; answers its id.
-- Its scheduled time is when it was asked for; it is never one of the schedule's ticks.
CREATE OR REPLACE FUNCTION pglock_cron_trigger(p_name varchar, p_by text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_id bigint;
BEGIN
    PERFORM pglock_cron_lock(p_name);
    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, requested_by, created_at)
    VALUES (p_name, clock_timestamp(), 'manual', 'pending', 1, p_by, clock_timestamp())
    RETURNING id INTO v_id;
    PERFORM pg_notify('pglock_cron', json_build_object('op', 'trigger', 'schedule', p_name)::text);
    RETURN v_id;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_trigger(varchar, text) FROM PUBLIC;

-- Queues the given past ticks of a schedule (computed from its spec by the caller), each once:
-- a tick that ran, failed, is running or is pending is left alone, and so is one after the
-- watermark, which the schedule's instances have yet to run or record. Answers how many were
-- queued.
CREATE OR REPLACE FUNCTION pglock_cron_backfill(p_name varchar, p_ticks timestamptz[], p_by text)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_s pglock_cron_schedules;
    v_count integer;
BEGIN
    v_s := pglock_cron_lock(p_name);
    IF EXISTS (SELECT FROM unnest(p_ticks) AS u(tick) WHERE u.tick IS NULL OR u.tick > clock_timestamp()) THEN
        RAISE EXCEPTION 'p_ticks: must be past times' USING ERRCODE = '22023', COLUMN = 'p_ticks';
    END IF;
    INSERT INTO pglock_cron_runs (schedule, scheduled_time, kind, status, attempt, requested_by, created_at)
    SELECT p_name, u.tick, 'backfill', 'pending',
           1 + (SELECT count(*) FROM pglock_cron_runs r
                 WHERE r.schedule = p_name AND r.scheduled_time = u.tick AND r.status IN ('abandoned', 'canceled')),
           p_by, clock_timestamp()
      FROM (SELECT DISTINCT tick FROM unnest(p_ticks) AS x(tick)) AS u
     WHERE u.tick <= v_s.accounted_until
       AND NOT EXISTS (SELECT FROM pglock_cron_runs r
                        WHERE r.schedule = p_name AND r.scheduled_time = u.tick
                          AND r.status IN ('ran', 'failed', 'running', 'pending'))
     ORDER BY u.tick;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
        PERFORM pg_notify('pglock_cron', json_build_object('op', 'backfill', 'schedule', p_name)::text);
    END IF;
    RETURN v_count;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_backfill(varchar, timestamptz[], text) FROM PUBLIC;

-- Deletes run history past each schedule's retention: records older than keep_for (from when
-- they finished, or were written), and all but the newest keep_runs records; one caller at a
-- time. Answers how many rows went.
CREATE OR REPLACE FUNCTION pglock_cron_collect()
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_s record;
    v_deleted bigint := 0;
    n bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(pglock_advisory_key('collect', 'pglock.cron')) THEN
        RETURN 0;
    END IF;
    FOR v_s IN SELECT name, keep_for_ms, keep_runs FROM pglock_cron_schedules ORDER BY name LOOP
        DELETE FROM pglock_cron_runs
         WHERE schedule = v_s.name AND status NOT IN ('pending', 'running')
           AND (coalesce(finished_at, created_at) < clock_timestamp() - v_s.keep_for_ms * interval '1 millisecond'
                OR id < (SELECT r.id FROM pglock_cron_runs r WHERE r.schedule = v_s.name
                          ORDER BY r.id DESC OFFSET v_s.keep_runs - 1 LIMIT 1));
        GET DIAGNOSTICS n = ROW_COUNT;
        v_deleted := v_deleted + n;
    END LOOP;
    RETURN v_deleted;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_collect() FROM PUBLIC;
