-- pglock's SQL contract, callable from any language: lease locks in a table with fencing
-- tokens and a fair queue, names for advisory locks, job deduplication, rate limits, semaphores
-- and cron, and what operators do. It reads top to bottom: the checks, the tables, the types,
-- then each function once, each part's story at its first table. This file was released with
-- v0.1.0 and never changes (TestReleasedMigrationsNeverChange): later versions are files of
-- their own.
--
-- Everything is created in the first existing schema of the migrating session's search_path
-- (current_schema(), usually public), or in pglock.schema, which pglock's migrator sets. The
-- functions are SECURITY DEFINER and pin that schema, with pg_temp last so that a caller's
-- temporary objects can never shadow ours. They run with the owner's rights, so nobody may call
-- them until granted: grant EXECUTE on the public functions (and SELECT on the tables) to the
-- application's role (docs/sql.md lists them).
--
-- Errors callers may act on carry a field the Go side reads, never the message, which may be
-- reworded or translated: SQLSTATE 22023 with COLUMN naming the argument at fault, and 42501
-- with CONSTRAINT 'pglock_schema_is_safe' for a schema every role may write. Times are
-- clock_timestamp()'s: a long transaction never makes a lease look younger than it is.
BEGIN;

-- What runs as the migrating role names pg_catalog's objects and exact types: a role that may
-- create objects in the schema could otherwise define a closer match (format(text, name), an
-- operator =(oid, integer)) and run code as that role, often a superuser. Every file alike.
SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

-- ==== Checks ====

-- SECURITY DEFINER functions are only as safe as the schema they resolve names in: a role that
-- may create objects there can shadow what they call (an exact-type length(varchar) beats
-- pg_catalog's length(text)) and run code as the owner. Refuse a schema every role may write.
CREATE FUNCTION pglock_check_schema_is_safe()
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

SELECT pglock_check_schema_is_safe();

-- Raises SQLSTATE 22023, with COLUMN naming the argument, for a lock name or holder id that no
-- row could carry.
CREATE FUNCTION pglock_check_name_and_holder(p_lock_name varchar, p_holder_id varchar)
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

-- The one rule for every lease, waiter's place, job attempt and cron run: from 100 ms to 24 h,
-- in milliseconds. A shorter lease could not be renewed in time over a network; the Go side
-- refuses the same (MinTTL, MaxTTL). The rule is SQL, so that the planner inlines it into the
-- callers' checks at no cost; pglock_raise_bad_ttl, which says what is wrong, runs only when
-- something is: callers check with
--     IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms'); END IF;
CREATE FUNCTION pglock_ttl_ok(p_ttl_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN p_ttl_ms OPERATOR(pg_catalog.>=) 100 AND p_ttl_ms OPERATOR(pg_catalog.<=) 86400000;

-- Raises SQLSTATE 22023 with COLUMN p_argument for a TTL of p_ttl_ms milliseconds (given in
-- milliseconds even for an argument in seconds).
CREATE FUNCTION pglock_raise_bad_ttl(p_ttl_ms bigint, p_argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION '%: a TTL must be from 100 to 86400000 milliseconds (24 h), got % ms',
        p_argument, coalesce(p_ttl_ms::text, 'null') USING ERRCODE = '22023', COLUMN = p_argument;
END;
$$;

REVOKE ALL ON FUNCTION pglock_check_schema_is_safe() FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_check_name_and_holder(varchar, varchar) FROM PUBLIC;

REVOKE ALL ON FUNCTION pglock_raise_bad_ttl(bigint, text) FROM PUBLIC;

-- ==== Tables ====

-- ---- Lease locks, their queue, and names for advisory locks ----

CREATE TABLE distributed_locks (
    lock_name     varchar(255) PRIMARY KEY,
    holder_id     varchar(255) NOT NULL,
    fencing_token bigint       NOT NULL,
    acquired_at   timestamptz  NOT NULL,
    expires_at    timestamptz  NOT NULL,
    metadata      jsonb        NOT NULL DEFAULT '{}',
    instance      varchar(255) NOT NULL DEFAULT ''
);

CREATE INDEX distributed_locks_expires_at_idx ON distributed_locks (expires_at);

COMMENT ON TABLE distributed_locks IS
    'pglock lease locks: one row per held (or expired, not yet reclaimed) lock. Write only through the pglock functions.';

COMMENT ON COLUMN distributed_locks.fencing_token IS
    'Strictly increasing per lock name across all holders ever; drawn after the row is ours.';

COMMENT ON COLUMN distributed_locks.instance IS
    'Which process holds the lock, as it describes itself (pglock: app@host:pid).';

-- CACHE 1 matters: with per-session caching a later nextval() in one session could return a
-- smaller value than an earlier one in another, and tokens would no longer follow lock order.
-- Not OWNED BY the table, so recreating the table cannot reset the tokens it hands out.
CREATE SEQUENCE distributed_locks_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

-- Waiters queue per lock name in waiter_seq order. A row lives while its waiter refreshes it;
-- an expired row is passed over.
CREATE TABLE distributed_lock_waiters (
    lock_name   varchar(255) NOT NULL,
    holder_id   varchar(255) NOT NULL,
    waiter_seq  bigint       GENERATED ALWAYS AS IDENTITY,
    instance    varchar(255) NOT NULL DEFAULT '',
    ttl_ms      bigint       NOT NULL,
    metadata    jsonb        NOT NULL DEFAULT '{}',
    enqueued_at timestamptz  NOT NULL,
    expires_at  timestamptz  NOT NULL,
    PRIMARY KEY (lock_name, holder_id)
);

CREATE INDEX distributed_lock_waiters_queue_idx ON distributed_lock_waiters (lock_name, waiter_seq);

COMMENT ON TABLE distributed_lock_waiters IS
    'pglock waiters: release_lock hands a lock to the first live waiter. Write only through the pglock functions.';

-- Opt-in: one row per name whose holders chose to register it.
CREATE TABLE advisory_lock_names (
    lock_key      bigint      PRIMARY KEY,
    namespace     text        NOT NULL DEFAULT '',
    name          text        NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE advisory_lock_names IS
    'pglock: the names behind advisory lock keys, registered by their holders. Write only through register_advisory_name.';

-- ---- Jobs ----
--
-- Job deduplication: each job's or event's effect once, and every duplicate delivery answered
-- with the first run's outcome. One row per (scope, key) records the claim, the attempts (each
-- with a fencing token), the lease of a runner outside any transaction, the outcome and how long
-- it is kept. Times are clock_timestamp()'s: a long transaction never makes a lease look
-- younger than it is.
--
-- Two ways to claim a key, which never block each other (pglock_job_claim): outside any
-- transaction, committing a 'running' row under a lease that the runner renews and that a
-- later delivery takes over once it expires; or inside the caller's transaction, writing the
-- row in it so that the outcome commits, or rolls back, with the effects. Claims take a
-- transaction-level advisory lock on the key first (pglock_job_lock_key), without waiting: a
-- claim inside a transaction that has not committed yet is invisible to a read, but not to
-- the lock.

CREATE TABLE pglock_jobs (
    scope            varchar(255) NOT NULL,
    job_key          text         NOT NULL CHECK (octet_length(job_key) BETWEEN 1 AND 1024),
    status           text         NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    holder_id        varchar(255) NOT NULL, -- the attempt's, as its runner named it
    instance         varchar(255) NOT NULL, -- the process that made the attempt
    attempts         integer      NOT NULL, -- claims so far, the current one included
    fencing_token    bigint       NOT NULL, -- the attempt's: larger than every earlier one's
    lease_expires_at timestamptz,           -- while running outside a transaction
    started_at       timestamptz  NOT NULL, -- the attempt's claim
    finished_at      timestamptz,
    last_error       text,                  -- of the last failed attempt
    result           jsonb,                 -- what the succeeded attempt saved
    fingerprint      text,                  -- of the payload, as the first delivery gave it
    retain_until     timestamptz  NOT NULL, -- the record counts until then, and is deleted after
    created_at       timestamptz  NOT NULL, -- the first claim
    PRIMARY KEY (scope, job_key)
);

-- pglock_job_collect deletes in this order, a batch at a time.
CREATE INDEX pglock_jobs_retain_until_idx ON pglock_jobs (retain_until);

-- One sequence for every attempt of every key: a token is never reused, not even after the
-- record is forgotten.
CREATE SEQUENCE pglock_jobs_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

-- Deliveries waiting for a key's outcome. An outcome committed while a key has waiters is
-- announced on the channel pglock_jobs, with the key's lock key as payload; without waiters
-- nothing is sent, for a notification serializes commits. Unlogged: a waiter lost in a crash
-- polls and registers again.
CREATE UNLOGGED TABLE pglock_job_waiters (
    scope      varchar(255) NOT NULL,
    job_key    text         NOT NULL,
    waiter_id  varchar(255) NOT NULL,
    expires_at timestamptz  NOT NULL,
    PRIMARY KEY (scope, job_key, waiter_id)
);

-- ---- Rate limits ----
--
-- Fleet-wide rate limits (package ratelimit): a generic cell rate algorithm, one timestamp per
-- key, on the database's clock. A key allows `burst` events at once and one more every
-- `interval` (the period divided by the rate); its row holds the theoretical arrival time (tat)
-- of the next event, and the row lock makes every instance's decision exact.

-- One table, two partitions: durable keys survive a crash; the others live in an unlogged
-- partition, which writes no WAL (a decision commits without a flush) and is emptied by a
-- crash, so their limits start afresh after one.
CREATE TABLE pglock_rate_limits (
    durable  boolean      NOT NULL,
    rate_key varchar(255) NOT NULL,
    tat      timestamptz  NOT NULL, -- the key is as fresh as a new one once this has passed
    PRIMARY KEY (durable, rate_key)
) PARTITION BY LIST (durable);

CREATE TABLE pglock_rate_limits_durable PARTITION OF pglock_rate_limits FOR VALUES IN (true);

CREATE UNLOGGED TABLE pglock_rate_limits_unlogged PARTITION OF pglock_rate_limits FOR VALUES IN (false);

-- Expired keys are deleted from the oldest.
CREATE INDEX pglock_rate_limits_tat_idx ON pglock_rate_limits (durable, tat);

-- ---- Semaphores ----
--
-- Counting semaphores: at most N holders of one name. Each holder is a lease in
-- distributed_locks, named 'pglock.semaphore/' || name || '/' || holder_id, so that it is
-- renewed, fenced, released and force-released exactly as a table lock is (extend_lock_ms,
-- pglock_fence, pglock_release, force_release_lock), and its token comes from the same
-- sequence. Waiters queue in distributed_lock_waiters under 'pglock.semaphore/' || name. Lock
-- names starting 'pglock.semaphore/' are reserved.

-- A semaphore's holders are the lock names in a byte-wise range ('…/' to '…0'), whatever the
-- database's collation. Partial: table locks do not maintain it.
CREATE INDEX distributed_locks_semaphore_idx ON distributed_locks (lock_name varchar_pattern_ops)
 WHERE lock_name ~>=~ 'pglock.semaphore/' AND lock_name ~<~ 'pglock.semaphore0';

-- ---- Cron ----
--
-- Cron: schedules whose every tick runs once across any number of instances, with no leader.
-- The schedulers compute ticks (a spec is parsed in Go, by robfig/cron's parser); the database
-- decides who runs them. Each schedule keeps a watermark, accounted_until: every tick up to it
-- has a row in pglock_cron_runs (or lies in a 'missed' row's range). A claim moves the watermark
-- only from the value the claiming instance read (compare and set, under the schedule's row
-- lock), so two instances that computed the same ticks cannot both account for them; and a
-- unique index on (schedule, scheduled_time) backs that up for the ticks a schedule fires.
--
-- A run is a leased row, not an open transaction: its instance renews the lease, and a run
-- whose lease expired is recorded 'abandoned' by whichever instance claims next (instances
-- claim at least every poll interval). Overlap and catch-up policies are decided here, under
-- the schedule's row lock, so every instance applies them the same way. Runs that wait for
-- their turn (a buffered tick, a missed tick caught up, a manual trigger, a backfilled tick)
-- are 'pending' rows, started oldest first when no run of the schedule runs, or at once for a
-- schedule that allows overlap.
--
-- Changes are announced on the channel pglock_cron as JSON: {"op": "trigger" | "backfill" |
-- "pause" | "resume" | "cancel", "schedule": name, "run": id} (run for cancel only).
-- Times are clock_timestamp()'s.

CREATE TABLE pglock_cron_schedules (
    name               varchar(255) PRIMARY KEY CHECK (octet_length(name) >= 1),
    spec               text         NOT NULL CHECK (octet_length(spec) BETWEEN 1 AND 1024),
    time_zone          text         NOT NULL, -- where a spec without CRON_TZ= is read (Go's name)
    overlap            text         NOT NULL CHECK (overlap IN ('skip', 'buffer_one', 'allow', 'replace')),
    catch_up           text         NOT NULL CHECK (catch_up IN ('skip', 'latest', 'all')),
    catch_up_window_ms bigint       NOT NULL CHECK (catch_up_window_ms > 0),
    keep_for_ms        bigint       NOT NULL CHECK (keep_for_ms > 0), -- run history retention
    keep_runs          integer      NOT NULL CHECK (keep_runs > 0),
    accounted_until    timestamptz  NOT NULL, -- every tick up to here is accounted for
    paused             boolean      NOT NULL DEFAULT false,
    pause_note         text,
    paused_by          text,
    paused_at          timestamptz,
    last_instance      varchar(255) NOT NULL, -- the last instance to register the schedule
    last_seen_at       timestamptz  NOT NULL, -- and when: a schedule not seen for long is orphaned
    created_at         timestamptz  NOT NULL
);

CREATE TABLE pglock_cron_runs (
    id               bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule         varchar(255) NOT NULL REFERENCES pglock_cron_schedules (name) ON DELETE CASCADE,
    scheduled_time   timestamptz  NOT NULL, -- the tick's (for a manual run: when it was asked for)
    kind             text         NOT NULL CHECK (kind IN ('scheduled', 'catch_up', 'manual', 'backfill')),
    status           text         NOT NULL CHECK (status IN ('pending', 'running', 'ran', 'failed', 'skipped',
                                                             'missed', 'abandoned', 'canceled')),
    attempt          integer      NOT NULL, -- runs of this tick started so far, this one included
    missed_until     timestamptz,           -- a 'missed' row covers the ticks up to here
    missed_count     bigint,                -- how many (NULL: too many to count)
    requested_by     text,                  -- who asked for a manual or backfilled run
    instance         varchar(255),          -- the instance that ran it
    fencing_token    bigint,                -- the run's: larger than every earlier run's
    lease_expires_at timestamptz,           -- while running
    created_at       timestamptz  NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    error            text                   -- why it failed, was skipped, abandoned or canceled
);

-- A tick the scheduler accounts for has one row: the guarantee behind the watermark.
CREATE UNIQUE INDEX pglock_cron_runs_tick_idx ON pglock_cron_runs (schedule, scheduled_time)
    WHERE kind IN ('scheduled', 'catch_up');

-- History, newest first, retention, and backfill's look-ups.
CREATE INDEX pglock_cron_runs_history_idx ON pglock_cron_runs (schedule, scheduled_time);

-- What is pending or running: few rows, read by every claim.
CREATE INDEX pglock_cron_runs_active_idx ON pglock_cron_runs (schedule, id) WHERE status IN ('pending', 'running');

CREATE SEQUENCE pglock_cron_runs_fencing_token_seq AS bigint START 1 CACHE 1 NO CYCLE;

-- ==== Types ====

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

-- What a claim answers: the outcome ('claimed', 'done', 'running', 'gave_up', 'mismatch'), the
-- record as the claim left or found it (NULLs when there is none), and, for a delivery that may
-- wait (running) or has claimed, the key's lock key.
CREATE TYPE pglock_job_answer AS (
    outcome          text,
    status           text,
    holder_id        varchar(255),
    instance         varchar(255),
    attempts         integer,
    fencing_token    bigint,
    lease_expires_at timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    last_error       text,
    result           jsonb,
    fingerprint      text,
    retain_until     timestamptz,
    created_at       timestamptz,
    lock_key         bigint
);

-- What a claim answers, one row per run started and per schedule it did not account for:
-- outcome 'run' (a run started: every column), 'stale' (the watermark moved since the instance
-- read it: accounted_until is the new one), 'early' (a tick is not due by the database's clock:
-- db_now says when it is) or 'unknown' (no such schedule: register it).
CREATE TYPE pglock_cron_claimed AS (
    outcome          text,
    schedule         varchar(255),
    id               bigint,
    scheduled_time   timestamptz,
    kind             text,
    attempt          integer,
    fencing_token    bigint,
    lease_expires_at timestamptz,
    accounted_until  timestamptz,
    db_now           timestamptz
);

-- ==== Functions ====

-- The one acquire, as one pglock_acquisition value rather than a set of one row, so that a
-- query can call it inside an expression: PostgreSQL sets such a call up far more cheaply than
-- a set-returning function in FROM, even one that never runs, so a try on a held lock costs
-- little more than reading the lock row (queries/locks.sql). Takes p_lock_name for
-- p_holder_id if it is free or expired and nobody is queued ahead, or if p_holder_id holds it
-- already (which extends it and keeps its token). Otherwise, with p_wait, queues p_holder_id (or
-- refreshes its place). Returns the caller's lock when acquired, else the current holder's, or
-- the reservation of the waiter a free lock is kept for (which has no token or acquired_at yet);
-- queued says whether this call wrote the caller's place in the queue, and checked_at is the
-- database time the answer holds for. Call it in a transaction of its own: an attempt that loses
-- a race to another acquirer locks the winner's row until the caller's transaction ends.
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
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'p_metadata: must be a JSON object, got %', jsonb_typeof(p_metadata)
            USING ERRCODE = '22023', COLUMN = 'p_metadata';
    END IF;
    IF length(p_instance) > 255 THEN
        RAISE EXCEPTION 'p_instance: % characters long, the limit is 255', length(p_instance)
            USING ERRCODE = '22023', COLUMN = 'p_instance';
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

REVOKE ALL ON FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

-- pglock_attempt's answer as a set of one row, for callers that read it with FROM.
CREATE FUNCTION pglock_acquire(
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

REVOKE ALL ON FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean) FROM PUBLIC;

-- The one release. If p_holder_id holds the lock, hands it to the first live waiter (a new
-- token, its own TTL from now; NOTIFY pglock_handoff with a JSON payload naming it) or, with
-- nobody waiting, deletes it (NOTIFY pglock_released, payload = the lock name). Either way it
-- removes p_holder_id's own place in the queue, so a waiter that gives up calls it too; and a
-- lock handed to the caller while it ran is released as well.
CREATE FUNCTION pglock_release(p_lock_name varchar, p_holder_id varchar)
RETURNS TABLE (released boolean, handed_off boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_lock   distributed_locks;
    v_waiter distributed_lock_waiters;
    v_now    timestamptz;
BEGIN
    IF p_lock_name IS NULL OR p_holder_id IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255
       OR length(p_holder_id) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    END IF;
    released := false;
    handed_off := false;

    -- The lock row first, waiter rows after and only with SKIP LOCKED: an acquirer locks them
    -- in the same order, so the two cannot deadlock.
    DELETE FROM distributed_locks l
     WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
    RETURNING l.* INTO v_lock;
    IF NOT FOUND THEN
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id;
        IF FOUND THEN
            RETURN NEXT;
            RETURN;
        END IF;
        -- Neither the lock nor a place: but a handoff to the caller, or its own poll taking the
        -- lock, may have committed while the delete above waited for the place's row. That
        -- commit deleted the place and wrote the lock row, which the first delete's snapshot
        -- could not see and this statement's does.
        DELETE FROM distributed_locks l
         WHERE l.lock_name = p_lock_name AND l.holder_id = p_holder_id
        RETURNING l.* INTO v_lock;
        IF NOT FOUND THEN
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    released := true;

    -- In one statement: forget the releaser's own place in the queue (a poll of its own can have
    -- written one just as a release handed it the lock), and take the first live waiter's place,
    -- skipping places a poll has locked. Places that expired are passed over (pglockctl gc
    -- removes them).
    v_now := clock_timestamp();
    IF NOT EXISTS (SELECT FROM distributed_lock_waiters w WHERE w.lock_name = p_lock_name) THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    WITH own_place AS (
        DELETE FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id = p_holder_id
    ), first_live AS (
        SELECT w.holder_id FROM distributed_lock_waiters w
         WHERE w.lock_name = p_lock_name AND w.holder_id <> p_holder_id AND w.expires_at > v_now
         ORDER BY w.waiter_seq LIMIT 1
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM distributed_lock_waiters w
     USING first_live f
     WHERE w.lock_name = p_lock_name AND w.holder_id = f.holder_id
    RETURNING w.* INTO v_waiter;
    IF NOT FOUND THEN
        PERFORM pg_notify('pglock_released', p_lock_name);
        RETURN NEXT;
        RETURN;
    END IF;
    handed_off := true;

    -- The name is ours until commit (we deleted its row), so drawing the token here keeps
    -- tokens in holding order. The lease starts now, after the waiter's last write of its
    -- place, from which the waiter counts it.
    v_now := clock_timestamp();
    INSERT INTO distributed_locks AS l
        (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
    VALUES (p_lock_name, v_waiter.holder_id, nextval('distributed_locks_fencing_token_seq'), v_now,
            v_now + v_waiter.ttl_ms * interval '1 millisecond', v_waiter.metadata, v_waiter.instance)
    RETURNING l.* INTO v_lock;
    PERFORM pg_notify('pglock_handoff', json_build_object(
        'lock_name', v_lock.lock_name, 'holder_id', v_lock.holder_id,
        'fencing_token', v_lock.fencing_token, 'expires_at', v_lock.expires_at)::text);
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_release(varchar, varchar) FROM PUBLIC;

-- True if p_lock_name is held, unexpired, with p_fencing_token; it then stays so until the
-- calling transaction ends (FOR SHARE on the lock row: no release, extension, handoff or
-- takeover can commit before it). SECURITY DEFINER, so a role with only SELECT may call it.
CREATE FUNCTION verify_fence(p_lock_name varchar, p_fencing_token bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM 1 FROM distributed_locks l
     WHERE l.lock_name = p_lock_name
       AND l.fencing_token = p_fencing_token
       AND l.expires_at > clock_timestamp()
       FOR SHARE;
    RETURN FOUND;
END;
$$;

REVOKE ALL ON FUNCTION verify_fence(varchar, bigint) FROM PUBLIC;

-- The seed contract: the functions callers of the original skill already use, with their
-- signatures and results, now through the queue. The acquires never queue; release_lock hands
-- off. Each calls the core directly, in plpgsql, which keeps its plans from call to call (an
-- SQL-language SECURITY DEFINER function is planned at every call). acquire_lock_ms takes
-- p_lock_name for p_holder_id for p_ttl_ms milliseconds of database time, if it is free,
-- expired, or already held by p_holder_id (which extends it and keeps its token), and returns
-- one row: on success the caller's lock, otherwise the current holder's.
CREATE FUNCTION acquire_lock_ms(
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

REVOKE ALL ON FUNCTION acquire_lock_ms(varchar, varchar, bigint, jsonb) FROM PUBLIC;

-- acquire_lock_ms in seconds, answering only whether the lock was taken.
CREATE FUNCTION acquire_lock(
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
    IF pglock_ttl_ok(p_ttl_seconds * 1000::bigint) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_seconds * 1000::bigint, 'p_ttl_seconds');
    END IF;
    SELECT a.acquired INTO v_acquired
      FROM pglock_attempt(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint, p_metadata) a;
    RETURN v_acquired;
END;
$$;

REVOKE ALL ON FUNCTION acquire_lock(varchar, varchar, integer, jsonb) FROM PUBLIC;

-- Moves the expiry of a lock p_holder_id holds (and that has not expired) to p_ttl_ms from now.
-- Returns the new expires_at, or NULL when the lock is not held by p_holder_id.
CREATE FUNCTION extend_lock_ms(p_lock_name varchar, p_holder_id varchar, p_ttl_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
BEGIN
    PERFORM pglock_check_name_and_holder(p_lock_name, p_holder_id);
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;

    UPDATE distributed_locks l
       SET expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE l.lock_name = p_lock_name
       AND l.holder_id = p_holder_id
       AND l.expires_at > clock_timestamp()
    RETURNING l.expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION extend_lock_ms(varchar, varchar, bigint) FROM PUBLIC;

-- extend_lock_ms in seconds: true while the lock is the caller's.
CREATE FUNCTION extend_lock(p_lock_name varchar, p_holder_id varchar, p_ttl_seconds integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pglock_ttl_ok(p_ttl_seconds * 1000::bigint) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_seconds * 1000::bigint, 'p_ttl_seconds');
    END IF;
    RETURN extend_lock_ms(p_lock_name, p_holder_id, p_ttl_seconds * 1000::bigint) IS NOT NULL;
END;
$$;

REVOKE ALL ON FUNCTION extend_lock(varchar, varchar, integer) FROM PUBLIC;

-- pglock_release, answering only whether the caller held the lock.
CREATE FUNCTION release_lock(p_lock_name varchar, p_holder_id varchar)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_released boolean;
BEGIN
    SELECT r.released INTO v_released FROM pglock_release(p_lock_name, p_holder_id) r;
    RETURN v_released;
END;
$$;

REVOKE ALL ON FUNCTION release_lock(varchar, varchar) FROM PUBLIC;

-- Releases p_lock_name whoever holds it, exactly as its holder's release would: the next live
-- waiter gets it (with a higher token) or waiters are told it is free. Returns the holder it
-- took the lock from; no row when the lock was not held.
CREATE FUNCTION force_release_lock(p_lock_name varchar)
RETURNS TABLE (holder_id varchar, instance varchar, fencing_token bigint, expires_at timestamptz, handed_off boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_lock distributed_locks;
BEGIN
    IF p_lock_name IS NULL OR length(p_lock_name) NOT BETWEEN 1 AND 255 THEN
        PERFORM pglock_check_name_and_holder(p_lock_name, 'operator');
    END IF;
    SELECT * INTO v_lock FROM distributed_locks l WHERE l.lock_name = p_lock_name FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT v_lock.holder_id, v_lock.instance, v_lock.fencing_token, v_lock.expires_at, r.handed_off
          FROM pglock_release(p_lock_name, v_lock.holder_id) r;
END;
$$;

REVOKE ALL ON FUNCTION force_release_lock(varchar) FROM PUBLIC;

-- Deletes lock rows and waiter places that expired (they block nobody, but accumulate when
-- processes die). Returns how many of each.
CREATE FUNCTION pglock_gc()
RETURNS TABLE (expired_locks bigint, expired_waiters bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    WITH gone AS (DELETE FROM distributed_locks l WHERE l.expires_at <= v_now RETURNING 1)
    SELECT count(*) INTO expired_locks FROM gone;
    WITH gone AS (DELETE FROM distributed_lock_waiters w WHERE w.expires_at <= v_now RETURNING 1)
    SELECT count(*) INTO expired_waiters FROM gone;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_gc() FROM PUBLIC;

-- The key of a name, as the Go package computes it: the first 8 bytes of the SHA-256 of the
-- name (or of namespace, NUL, name), read as a big-endian bigint. A body in this form binds
-- what it calls now, as the migrating role resolves it, so every name is pg_catalog's.
CREATE FUNCTION pglock_advisory_key(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
           CASE WHEN p_namespace OPERATOR(pg_catalog.=) ''::pg_catalog.text
                THEN pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name)
                ELSE pg_catalog.convert_to(p_namespace, 'UTF8'::pg_catalog.name)
                     OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
                     OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_name, 'UTF8'::pg_catalog.name) END
       ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8;

-- Records the name behind its key, once; returns the key.
CREATE FUNCTION register_advisory_name(p_name text, p_namespace text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_key bigint;
BEGIN
    IF p_name IS NULL OR p_name = '' OR length(p_name) > 255 THEN
        RAISE EXCEPTION 'p_name: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_name';
    END IF;
    v_key := pglock_advisory_key(p_name, coalesce(p_namespace, ''));
    INSERT INTO advisory_lock_names (lock_key, namespace, name)
    VALUES (v_key, coalesce(p_namespace, ''), p_name)
    ON CONFLICT (lock_key) DO NOTHING;
    RETURN v_key;
END;
$$;

REVOKE ALL ON FUNCTION register_advisory_name(text, text) FROM PUBLIC;

-- Every advisory lock held or awaited in this database: its key (one bigint, or two ints when
-- pair), its registered name if any, the mode, whether it is granted or since when it is
-- awaited, the backend (pid, application, client address, session start) and the pids that
-- block a waiter. It runs with the caller's rights: seeing other roles' sessions takes
-- pg_read_all_stats.
CREATE FUNCTION advisory_locks()
RETURNS TABLE (
    lock_key         bigint,
    pair             boolean,
    pair_namespace   integer,
    pair_id          integer,
    namespace        text,
    name             text,
    mode             text,
    granted          boolean,
    waiting_since    timestamptz,
    pid              integer,
    application_name text,
    client_addr      inet,
    backend_start    timestamptz,
    blocked_by       integer[]
)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE WHEN l.objsubid = 1 THEN (l.classid::bigint << 32) | l.objid::bigint END,
           l.objsubid = 2,
           CASE WHEN l.objsubid = 2 THEN (l.classid::bigint - CASE WHEN l.classid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           CASE WHEN l.objsubid = 2 THEN (l.objid::bigint - CASE WHEN l.objid::bigint > 2147483647 THEN 4294967296 ELSE 0 END)::integer END,
           n.namespace,
           n.name,
           CASE l.mode WHEN 'ExclusiveLock' THEN 'exclusive' WHEN 'ShareLock' THEN 'shared' ELSE l.mode END,
           l.granted,
           l.waitstart,
           l.pid,
           a.application_name,
           a.client_addr,
           a.backend_start,
           CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid) ELSE '{}' END
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
      LEFT JOIN advisory_lock_names n
             ON l.objsubid = 1 AND n.lock_key = (l.classid::bigint << 32) | l.objid::bigint
     WHERE l.locktype = 'advisory'
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
     ORDER BY l.granted DESC, l.pid, l.objsubid, l.classid, l.objid, l.mode;
$$;

-- Whether the calling session holds an advisory lock, in the given mode: a bigint key
-- (p_key), or with p_pair the two ints (p_ns, p_id). pg_locks shows a bigint key as its high
-- and low 32 bits (objsubid 1), a pair as its two ints (objsubid 2), all as unsigned oids.
CREATE FUNCTION pglock_session_holds_advisory(p_pair boolean, p_shared boolean, p_ns integer,
                                              p_id integer, p_key bigint)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks l
         WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'advisory' AND l.granted
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
           AND l.mode = CASE WHEN p_shared THEN 'ShareLock' ELSE 'ExclusiveLock' END
           AND CASE WHEN p_pair
                    THEN l.objsubid = 2
                         AND l.classid::bigint = (p_ns::bigint & 4294967295)
                         AND l.objid::bigint = (p_id::bigint & 4294967295)
                    ELSE l.objsubid = 1
                         AND l.classid::bigint = ((p_key >> 32) & 4294967295)
                         AND l.objid::bigint = (p_key & 4294967295)
               END);
$$;

-- pglock_fence: verify_fence that also bounds the verifying transaction on the server. A fenced
-- transaction holds the lock row FOR SHARE until it ends; if its client stops talking (a frozen
-- VM, a silent partition), PostgreSQL keeps it open until TCP finds the connection dead, about
-- two hours by default, and no takeover of the lock can commit meanwhile. Bounding the
-- transaction's idle time and each statement to the lease's remaining time plus a grace ends
-- such a transaction, and its FOR SHARE, soon after the lease does.
--
-- Returns the lease's expiry when p_lock_name is held, unexpired, with p_fencing_token, and NULL
-- (changing nothing) otherwise. When held, the lock stays so until the calling transaction ends
-- (FOR SHARE, as in verify_fence), and for the rest of that transaction
-- idle_in_transaction_session_timeout and statement_timeout are at most the time left on the
-- lease plus p_grace_ms (as SET LOCAL would set them; a stricter value already in force stays).
-- Both timeouts restart with each statement: a session that goes quiet is ended, and a
-- statement canceled, once that long has passed since it began, so a transaction that fences,
-- writes and then stops talking is ended by the lease's expiry plus the grace; time it spends
-- working after the fence moves that point later by as much. SQLSTATE 22023 (COLUMN
-- p_grace_ms) for a grace that is NULL, negative or over 24 h.
CREATE FUNCTION pglock_fence(p_lock_name varchar, p_fencing_token bigint, p_grace_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_expires_at timestamptz;
    v_bound      bigint;
    v_name       text;
    v_ms         bigint;
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
    -- Both in milliseconds, 0 for none: current_setting shows them with a unit that interval
    -- input reads ('30s', '1min'). A stricter limit (the caller's, or an earlier fence's in
    -- this transaction) is kept.
    FOREACH v_name IN ARRAY ARRAY['idle_in_transaction_session_timeout', 'statement_timeout'] LOOP
        v_ms := (extract(epoch FROM current_setting(v_name)::interval) * 1000)::bigint;
        IF v_ms = 0 OR v_ms > v_bound THEN
            PERFORM set_config(v_name, v_bound::text, true);
        END IF;
    END LOOP;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_fence(varchar, bigint, bigint) FROM PUBLIC;

-- The advisory lock key of a job (one bigint): pglock_advisory_key of the key in the namespace
-- 'pglock.jobs/' || scope, whose formula this repeats. Advisory names in namespaces starting
-- 'pglock.jobs/' are reserved. The helpers a claim calls are PL/pgSQL: called from PL/pgSQL, a
-- SQL function that cannot be inlined has its body planned again in every transaction.
CREATE FUNCTION pglock_job_lock_key(p_scope varchar, p_key text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN ('x'::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.encode(pg_catalog.sha256(
               pg_catalog.convert_to('pglock.jobs/'::pg_catalog.text OPERATOR(pg_catalog.||) p_scope, 'UTF8'::pg_catalog.name)
               OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
               OPERATOR(pg_catalog.||) pg_catalog.convert_to(p_key, 'UTF8'::pg_catalog.name)
           ), 'hex'::pg_catalog.text), 1, 16))::pg_catalog."bit"(64)::pg_catalog.int8;
END;
$$;

-- SQLSTATE 22023, COLUMN naming the argument, unless scope and key can name a job.
CREATE FUNCTION pglock_job_check_key(p_scope varchar, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_scope IS NULL OR length(p_scope) > 255 THEN
        RAISE EXCEPTION 'p_scope: must be at most 255 characters' USING ERRCODE = '22023', COLUMN = 'p_scope';
    END IF;
    IF p_key IS NULL OR octet_length(p_key) NOT BETWEEN 1 AND 1024 THEN
        RAISE EXCEPTION 'p_key: must be 1 to 1024 bytes' USING ERRCODE = '22023', COLUMN = 'p_key';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_check_key(varchar, text) FROM PUBLIC;

-- Claims a delivery of (p_scope, p_key) for the holder p_holder_id of instance p_instance, in one
-- statement, and answers with the outcome and the record:
--   done      it succeeded before, and the record is within its retention: do nothing;
--   running   another attempt is under way (a live lease, or a claim in a transaction that has
--             not ended): do nothing, or wait for its outcome (see pglock_job_await);
--   gave_up   it was claimed p_max_attempts times (0: no limit) and the last attempt failed,
--             or its runner vanished;
--   mismatch  the record's fingerprint is not p_fingerprint (a NULL on either side matches);
--   claimed   this delivery runs it: a new record, or one that had failed, whose lease expired
--             (its runner vanished) or whose retention ended (never while a lease on it is
--             live). attempts counts the claims of the record, fencing_token is the attempt's.
-- Outside a transaction (p_transactional false) the record is 'running' under a lease of
-- p_ttl_ms, renewed by pglock_job_renew and ended by pglock_job_finish. Inside the caller's
-- transaction (p_transactional true), the row is written there as 'succeeded', so that whatever
-- commits the transaction commits the outcome with the effects, and a rollback leaves the key to
-- the next delivery: the caller calls pglock_job_finish_tx just before COMMIT, and after a
-- rollback records a failure with a claim outside a transaction and pglock_job_finish. The claim's advisory lock then lasts until the transaction ends, and
-- with p_idle_timeout_ms > 0 the transaction's idle_in_transaction_session_timeout is at most
-- that (never loosened), so that a caller that vanishes mid-transaction holds the key no
-- longer. p_window_ms is the retention of the record from now (and from its outcome, which
-- pglock_job_finish sets). A claim never waits for another: not for a row lock held by an
-- attempt, nor for the uncommitted insert of one.
CREATE FUNCTION pglock_job_claim(
    p_scope varchar, p_key text, p_holder_id varchar, p_instance varchar, p_transactional boolean,
    p_ttl_ms bigint, p_fingerprint text, p_window_ms bigint, p_max_attempts integer,
    p_idle_timeout_ms bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_lock_key bigint;
    v_now      timestamptz;
    v_job      pglock_jobs;
    v_found    boolean;
    v_setting  bigint;
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_holder_id IS NULL OR p_holder_id = '' OR length(p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_holder_id: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_holder_id';
    END IF;
    IF p_transactional IS NULL THEN
        RAISE EXCEPTION 'p_transactional: must not be null' USING ERRCODE = '22023', COLUMN = 'p_transactional';
    END IF;
    IF NOT p_transactional AND pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    IF p_max_attempts IS NULL OR p_max_attempts < 0 THEN
        RAISE EXCEPTION 'p_max_attempts: must be 0 (no limit) or more' USING ERRCODE = '22023', COLUMN = 'p_max_attempts';
    END IF;
    IF p_idle_timeout_ms IS NULL OR p_idle_timeout_ms < 0 OR p_idle_timeout_ms > 2147483647 THEN
        RAISE EXCEPTION 'p_idle_timeout_ms: must be from 0 (none) to 2147483647' USING ERRCODE = '22023', COLUMN = 'p_idle_timeout_ms';
    END IF;
    -- Twice at most: a record read before the advisory lock may change before the claim's
    -- write (an attempt finishing); read after it, it changes only that way.
    FOR i IN 1..2 LOOP
        v_now := clock_timestamp();
        SELECT * INTO v_job FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key;
        -- A record counts within its retention, and always while a lease on it is live.
        v_found := FOUND AND (v_job.retain_until > v_now OR (v_job.status = 'running' AND v_job.lease_expires_at > v_now));
        IF v_found THEN
            IF p_fingerprint IS NOT NULL AND v_job.fingerprint IS NOT NULL AND v_job.fingerprint <> p_fingerprint THEN
                RETURN pglock_job_answer_of('mismatch', v_job, v_lock_key);
            ELSIF v_job.status = 'succeeded' THEN
                RETURN pglock_job_answer_of('done', v_job, v_lock_key);
            ELSIF v_job.status = 'running' AND v_job.lease_expires_at > v_now THEN
                RETURN pglock_job_answer_of('running', v_job, pglock_job_lock_key(p_scope, p_key));
            ELSIF p_max_attempts > 0 AND v_job.attempts >= p_max_attempts THEN
                -- Failed, or running under a lease that expired: its runner vanished, and a
                -- crashed attempt counts.
                RETURN pglock_job_answer_of('gave_up', v_job, v_lock_key);
            END IF;
        END IF;
        -- The key's lock key is a SHA-256: only a claim that may write, or wait, pays for it.
        v_lock_key := coalesce(v_lock_key, pglock_job_lock_key(p_scope, p_key));
        IF NOT pg_try_advisory_xact_lock(v_lock_key) THEN
            IF NOT v_found THEN
                v_job := NULL;
            END IF;
            RETURN pglock_job_answer_of('running', v_job, v_lock_key);
        END IF;

        v_now := clock_timestamp();
        INSERT INTO pglock_jobs AS j (scope, job_key, status, holder_id, instance, attempts, fencing_token,
                                      lease_expires_at, started_at, finished_at, retain_until, created_at, fingerprint)
        VALUES (p_scope, p_key, CASE WHEN p_transactional THEN 'succeeded' ELSE 'running' END,
                p_holder_id, coalesce(p_instance, ''), 1, nextval('pglock_jobs_fencing_token_seq'),
                CASE WHEN p_transactional THEN NULL ELSE v_now + p_ttl_ms * interval '1 millisecond' END,
                v_now, NULL,
                v_now + p_window_ms * interval '1 millisecond', v_now, p_fingerprint)
        ON CONFLICT (scope, job_key) DO UPDATE
           SET status = excluded.status, holder_id = excluded.holder_id, instance = excluded.instance,
               fencing_token = excluded.fencing_token, lease_expires_at = excluded.lease_expires_at,
               started_at = excluded.started_at, finished_at = excluded.finished_at,
               -- A record past its retention is gone: this is a first delivery again.
               attempts = CASE WHEN j.retain_until > v_now THEN j.attempts + 1 ELSE 1 END,
               created_at = CASE WHEN j.retain_until > v_now THEN j.created_at ELSE v_now END,
               last_error = CASE WHEN j.retain_until > v_now THEN j.last_error END,
               result = NULL,
               fingerprint = CASE WHEN j.retain_until > v_now THEN coalesce(j.fingerprint, excluded.fingerprint)
                                  ELSE excluded.fingerprint END,
               retain_until = excluded.retain_until
         WHERE NOT (j.status = 'running' AND j.lease_expires_at > v_now)
           AND (j.retain_until <= v_now
                OR ((p_fingerprint IS NULL OR j.fingerprint IS NULL OR j.fingerprint = p_fingerprint)
                    AND j.status <> 'succeeded'
                    AND (p_max_attempts = 0 OR j.attempts < p_max_attempts)))
        RETURNING * INTO v_job;
        IF FOUND THEN
            IF p_transactional AND p_idle_timeout_ms > 0 THEN
                -- In milliseconds, 0 for none. current_setting shows it with a unit interval
                -- input reads ('30s', '1min'); pg_settings would cost listing every setting.
                v_setting := (extract(epoch FROM current_setting('idle_in_transaction_session_timeout')::interval) * 1000)::bigint;
                IF v_setting = 0 OR v_setting > p_idle_timeout_ms THEN
                    PERFORM set_config('idle_in_transaction_session_timeout', p_idle_timeout_ms::text, true);
                END IF;
            END IF;
            RETURN pglock_job_answer_of('claimed', v_job, v_lock_key);
        END IF;
    END LOOP;
    -- Changed twice between read and write: only an attempt finishing changes a record this
    -- claim may not take, and it does so once.
    RETURN pglock_job_answer_of('running', v_job, v_lock_key);
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_claim(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint) FROM PUBLIC;

CREATE FUNCTION pglock_job_answer_of(p_outcome text, p_job pglock_jobs, p_lock_key bigint)
RETURNS pglock_job_answer
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RETURN ROW(p_outcome, p_job.status, p_job.holder_id, p_job.instance, p_job.attempts, p_job.fencing_token,
               p_job.lease_expires_at, p_job.started_at, p_job.finished_at, p_job.last_error, p_job.result,
               p_job.fingerprint, p_job.retain_until, p_job.created_at, p_lock_key)::pglock_job_answer;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_answer_of(text, pglock_jobs, bigint) FROM PUBLIC;

-- Renews the lease of the attempt with p_fencing_token for p_ttl_ms from now; returns the new
-- expiry, or NULL (changing nothing) when the attempt no longer holds an unexpired lease.
CREATE FUNCTION pglock_job_renew(p_scope varchar, p_key text, p_fencing_token bigint, p_ttl_ms bigint)
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
    UPDATE pglock_jobs j
       SET lease_expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running' AND j.lease_expires_at > clock_timestamp()
    RETURNING j.lease_expires_at INTO v_expires_at;
    RETURN v_expires_at;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_renew(varchar, text, bigint, bigint) FROM PUBLIC;

-- Records the outcome of the attempt with p_fencing_token, claimed outside a transaction:
-- succeeded with p_result, or failed with p_error; the record is then kept p_window_ms from now.
-- Returns when it finished (again, for the same outcome: a retry after a lost answer is no
-- error), or NULL, changing nothing, when the record is no longer that attempt's (taken over,
-- or forgotten): a runner whose lease was lost cannot mark done what another now runs. An
-- attempt whose lease expired untaken may still finish: nobody else ran it. Waiters are told
-- when the outcome commits.
CREATE FUNCTION pglock_job_finish(p_scope varchar, p_key text, p_fencing_token bigint, p_succeeded boolean,
                                  p_result jsonb, p_error text, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_succeeded IS NULL THEN
        RAISE EXCEPTION 'p_succeeded: must not be null' USING ERRCODE = '22023', COLUMN = 'p_succeeded';
    END IF;
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    UPDATE pglock_jobs j
       SET status = CASE WHEN p_succeeded THEN 'succeeded' ELSE 'failed' END,
           finished_at = v_now, lease_expires_at = NULL,
           result = CASE WHEN p_succeeded THEN p_result END,
           last_error = CASE WHEN p_succeeded THEN j.last_error ELSE coalesce(p_error, '') END,
           retain_until = v_now + p_window_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'running';
    IF NOT FOUND THEN
        SELECT j.finished_at INTO v_now FROM pglock_jobs j
         WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
           AND j.status = CASE WHEN p_succeeded THEN 'succeeded' ELSE 'failed' END;
        RETURN v_now;
    END IF;
    PERFORM pglock_job_announce(p_scope, p_key);
    RETURN v_now;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint) FROM PUBLIC;

-- Records when the attempt claimed inside the calling transaction with p_fencing_token
-- finished, and keeps its record p_window_ms from then (not from the claim: fn may have run
-- longer than the window), and announces the outcome; call it just before COMMIT, which makes
-- the outcome true. Returns the finish time, or NULL when this transaction holds no such claim.
CREATE FUNCTION pglock_job_finish_tx(p_scope varchar, p_key text, p_fencing_token bigint, p_window_ms bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_window_ms IS NULL OR p_window_ms < 1 OR p_window_ms > 315360000000 THEN
        RAISE EXCEPTION 'p_window_ms: must be from 1 ms to 3650 days, got %', coalesce(p_window_ms::text, 'null')
            USING ERRCODE = '22023', COLUMN = 'p_window_ms';
    END IF;
    UPDATE pglock_jobs j
       SET finished_at = v_now, retain_until = v_now + p_window_ms * interval '1 millisecond'
     WHERE j.scope = p_scope AND j.job_key = p_key AND j.fencing_token = p_fencing_token
       AND j.status = 'succeeded' AND j.finished_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM pglock_job_announce(p_scope, p_key);
    RETURN v_now;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_finish_tx(varchar, text, bigint, bigint) FROM PUBLIC;

-- Announces the outcome of (p_scope, p_key) on the channel pglock_jobs, when the transaction
-- commits, if the key has waiters; otherwise does nothing, for a notification serializes
-- commits.
CREATE FUNCTION pglock_job_announce(p_scope varchar, p_key text)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    IF EXISTS (SELECT FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key) THEN
        PERFORM pg_notify('pglock_jobs', pglock_job_lock_key(p_scope, p_key)::text);
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_announce(varchar, text) FROM PUBLIC;

-- Registers p_waiter_id as waiting for the outcome of (p_scope, p_key) until p_ttl_ms from now
-- (again to extend it): pglock_job_finish announces outcomes of keys with waiters on the
-- channel pglock_jobs. LISTEN first, register, then claim again: an outcome committed between
-- the claim's answer and the registration would go unannounced.
CREATE FUNCTION pglock_job_await(p_scope varchar, p_key text, p_waiter_id varchar, p_ttl_ms bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    IF p_waiter_id IS NULL OR p_waiter_id = '' OR length(p_waiter_id) > 255 THEN
        RAISE EXCEPTION 'p_waiter_id: must be 1 to 255 characters' USING ERRCODE = '22023', COLUMN = 'p_waiter_id';
    END IF;
    IF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    INSERT INTO pglock_job_waiters (scope, job_key, waiter_id, expires_at)
    VALUES (p_scope, p_key, p_waiter_id, clock_timestamp() + p_ttl_ms * interval '1 millisecond')
    ON CONFLICT (scope, job_key, waiter_id) DO UPDATE SET expires_at = excluded.expires_at;
    RETURN pglock_job_lock_key(p_scope, p_key);
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_await(varchar, text, varchar, bigint) FROM PUBLIC;

CREATE FUNCTION pglock_job_unawait(p_scope varchar, p_key text, p_waiter_id varchar)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
    DELETE FROM pglock_job_waiters w WHERE w.scope = p_scope AND w.job_key = p_key AND w.waiter_id = p_waiter_id;
$$;

REVOKE ALL ON FUNCTION pglock_job_unawait(varchar, text, varchar) FROM PUBLIC;

-- Deletes the record of (p_scope, p_key) so that the key may run again, after waiting for a
-- claim inside a transaction to end; an attempt running outside one loses its lease (its next
-- renewal finds the record gone). Returns the deleted record's status, NULL when there was none.
CREATE FUNCTION pglock_job_forget(p_scope varchar, p_key text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_status text;
BEGIN
    PERFORM pglock_job_check_key(p_scope, p_key);
    PERFORM pg_advisory_xact_lock(pglock_job_lock_key(p_scope, p_key));
    DELETE FROM pglock_jobs j WHERE j.scope = p_scope AND j.job_key = p_key RETURNING j.status INTO v_status;
    IF v_status IS NOT NULL THEN
        PERFORM pglock_job_announce(p_scope, p_key);
    END IF;
    RETURN v_status;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_forget(varchar, text) FROM PUBLIC;

-- Deletes up to p_batch records past their retention (never one running under a live lease,
-- nor one a claim holds: those are skipped, not waited for), and registrations of waiters past
-- theirs. Returns how many records it deleted: call it until that is less than p_batch. Each
-- call is one short transaction.
CREATE FUNCTION pglock_job_collect(p_batch integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_deleted integer;
BEGIN
    IF p_batch IS NULL OR p_batch < 1 OR p_batch > 100000 THEN
        RAISE EXCEPTION 'p_batch: must be from 1 to 100000' USING ERRCODE = '22023', COLUMN = 'p_batch';
    END IF;
    DELETE FROM pglock_jobs j
     WHERE (j.scope, j.job_key) IN (
            SELECT c.scope, c.job_key FROM pglock_jobs c
             WHERE c.retain_until <= clock_timestamp()
               AND NOT (c.status = 'running' AND c.lease_expires_at > clock_timestamp())
             ORDER BY c.retain_until
             LIMIT p_batch
               FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_deleted = ROW_COUNT;
    DELETE FROM pglock_job_waiters w WHERE w.expires_at <= clock_timestamp();
    RETURN v_deleted;
END;
$$;

REVOKE ALL ON FUNCTION pglock_job_collect(integer) FROM PUBLIC;

-- Takes p_cost events for p_rate_key, allowing p_burst at once and one every
-- p_interval_us microseconds: allowed with wait_us 0 when they fit now; allowed with wait_us
-- > 0, reserved, when they fit within p_max_wait_us (the caller waits that long, then goes
-- ahead); otherwise not allowed, changing nothing, with wait_us saying how long until they
-- would fit. remaining is how many more would fit now, after this. A key whose tat has passed
-- is as a new one; about one call in a hundred deletes up to 100 such keys, so the table keeps
-- only keys in use. SQLSTATE 22023, COLUMN naming the argument, for a key of 0 or over 255
-- characters, a non-positive interval, a burst under 1, a cost under 1 or over the burst, or
-- a negative wait.
CREATE FUNCTION pglock_rate_take(p_durable boolean, p_rate_key varchar, p_interval_us bigint, p_burst integer,
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

-- Takes one of p_permits places of semaphore p_name for p_holder_id, if fewer than p_permits
-- are held and no live waiter queued ahead of the caller would be left out; with p_wait, a
-- caller that cannot have one takes (or keeps) a place in the queue. Changing p_permits
-- applies from the next attempt on; holders keep their places. Attempts on one name are
-- serialized by a transaction-level advisory lock, held for the statement; expired places are
-- deleted first, waiting for a renewal or a fenced transaction that holds one. Names have no
-- '/'. Only READ COMMITTED transactions may call it (SQLSTATE 0A000 otherwise). Returns acquired
-- (and then lock_name, the holder's row, its fencing_token and expires_at), queued (this call
-- wrote the caller's place), and holders, the live holders counted. SQLSTATE 22023 with COLUMN
-- for a name whose holder rows' names would be over 255 characters, permits under 1, or a TTL
-- out of range.
CREATE FUNCTION pglock_semaphore_attempt(p_name varchar, p_holder_id varchar, p_permits integer, p_ttl_ms bigint,
                                         p_metadata jsonb, p_instance varchar, p_wait boolean)
RETURNS TABLE (acquired boolean, queued boolean, lock_name varchar, fencing_token bigint, expires_at timestamptz,
               holders integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_queue  varchar;
    v_prefix varchar;
    v_now    timestamptz;
    v_seq    bigint;
    v_ahead  integer;
BEGIN
    IF p_name IS NULL OR p_name = '' OR strpos(p_name, '/') > 0 OR p_holder_id IS NULL OR p_holder_id = ''
       OR length('pglock.semaphore/' || p_name || '/' || p_holder_id) > 255 THEN
        RAISE EXCEPTION 'p_name: a semaphore''s name has no ''/'', and its holder rows are named ''pglock.semaphore/<name>/<holder>'', at most 255 characters'
            USING ERRCODE = '22023', COLUMN = 'p_name';
    ELSIF p_permits IS NULL OR p_permits < 1 THEN
        RAISE EXCEPTION 'p_permits: must be at least 1' USING ERRCODE = '22023', COLUMN = 'p_permits';
    ELSIF pglock_ttl_ok(p_ttl_ms) IS NOT TRUE THEN
        PERFORM pglock_raise_bad_ttl(p_ttl_ms, 'p_ttl_ms');
    END IF;
    -- A snapshot older than the advisory lock would miss holders admitted meanwhile.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pglock_semaphore_attempt runs only in READ COMMITTED transactions, not %',
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

    SELECT count(*) INTO holders FROM distributed_locks l
     WHERE l.lock_name ~>=~ 'pglock.semaphore/' AND l.lock_name ~<~ 'pglock.semaphore0' -- the index's
       AND l.lock_name ~>=~ v_prefix AND l.lock_name ~<~ (v_queue || '0') AND l.expires_at > v_now;
    SELECT w.waiter_seq INTO v_seq FROM distributed_lock_waiters w
     WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
    SELECT count(*) INTO v_ahead FROM distributed_lock_waiters w
     WHERE w.lock_name = v_queue AND w.expires_at > v_now AND w.holder_id <> p_holder_id
       AND (v_seq IS NULL OR w.waiter_seq < v_seq);

    IF holders + v_ahead < p_permits THEN
        INSERT INTO distributed_locks AS l (lock_name, holder_id, fencing_token, acquired_at, expires_at, metadata, instance)
        VALUES (v_prefix || p_holder_id, p_holder_id, nextval('distributed_locks_fencing_token_seq'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond', coalesce(p_metadata, '{}'), coalesce(p_instance, ''))
        RETURNING l.lock_name, l.fencing_token, l.expires_at INTO lock_name, fencing_token, expires_at;
        DELETE FROM distributed_lock_waiters w WHERE w.lock_name = v_queue AND w.holder_id = p_holder_id;
        acquired := true;
        holders := holders + 1;
    ELSIF p_wait THEN
        INSERT INTO distributed_lock_waiters AS w (lock_name, holder_id, instance, ttl_ms, metadata, enqueued_at, expires_at)
        VALUES (v_queue, p_holder_id, coalesce(p_instance, ''), p_ttl_ms, coalesce(p_metadata, '{}'), v_now,
                v_now + p_ttl_ms * interval '1 millisecond')
        ON CONFLICT ON CONSTRAINT distributed_lock_waiters_pkey DO UPDATE SET expires_at = excluded.expires_at;
        queued := v_seq IS NULL;
    END IF;
    RETURN NEXT;
END;
$$;

REVOKE ALL ON FUNCTION pglock_semaphore_attempt(varchar, varchar, integer, bigint, jsonb, varchar, boolean) FROM PUBLIC;

CREATE FUNCTION pglock_cron_check(p_name varchar, p_instance varchar)
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

-- Registers a schedule for an instance, or updates it (a new spec or policy from a new
-- deployment), keeping its watermark and pause; answers the watermark. A new schedule's
-- watermark is now: a schedule has no ticks before it existed.
CREATE FUNCTION pglock_cron_register(p_name varchar, p_spec text, p_time_zone text, p_overlap text,
    p_catch_up text, p_catch_up_window_ms bigint, p_keep_for_ms bigint, p_keep_runs integer, p_instance varchar)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_until timestamptz;
BEGIN
    PERFORM pglock_cron_check(p_name, p_instance);
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
    INSERT INTO pglock_cron_schedules AS s (name, spec, time_zone, overlap, catch_up, catch_up_window_ms,
                                            keep_for_ms, keep_runs, accounted_until, last_instance, last_seen_at, created_at)
    VALUES (p_name, p_spec, p_time_zone, p_overlap, p_catch_up, p_catch_up_window_ms,
            p_keep_for_ms, p_keep_runs, v_now, p_instance, v_now, v_now)
    ON CONFLICT (name) DO UPDATE
       SET spec = excluded.spec, time_zone = excluded.time_zone, overlap = excluded.overlap,
           catch_up = excluded.catch_up, catch_up_window_ms = excluded.catch_up_window_ms,
           keep_for_ms = excluded.keep_for_ms, keep_runs = excluded.keep_runs,
           last_instance = excluded.last_instance, last_seen_at = excluded.last_seen_at
    RETURNING s.accounted_until INTO v_until;
    RETURN v_until;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_register(varchar, text, text, text, text, bigint, bigint, integer, varchar) FROM PUBLIC;

-- Records that an instance still has these schedules; answers those it named that do not
-- exist (an operator deleted them: the instance registers them again). A schedule whose row
-- another transaction holds (a claim) is skipped, not waited for: a claim holds several rows,
-- and this record can wait for the next time.
CREATE FUNCTION pglock_cron_seen(p_names varchar[], p_instance varchar)
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

-- Starts a run: a new row, or a pending one (p_id), under a new token and lease.
CREATE FUNCTION pglock_cron_start(p_schedule varchar, p_id bigint, p_time timestamptz, p_kind text,
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
        VALUES (p_schedule, p_time, p_kind, 'running', 1, p_instance, nextval('pglock_cron_runs_fencing_token_seq'),
                p_now + p_ttl_ms * interval '1 millisecond', p_now, p_now)
        RETURNING * INTO r;
    ELSE
        UPDATE pglock_cron_runs
           SET status = 'running', instance = p_instance, fencing_token = nextval('pglock_cron_runs_fencing_token_seq'),
               lease_expires_at = p_now + p_ttl_ms * interval '1 millisecond', started_at = p_now
         WHERE id = p_id
        RETURNING * INTO r;
    END IF;
    RETURN ROW('run', r.schedule, r.id, r.scheduled_time, r.kind, r.attempt, r.fencing_token,
               r.lease_expires_at, NULL, p_now)::pglock_cron_claimed;
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_start(varchar, bigint, timestamptz, text, varchar, bigint, timestamptz) FROM PUBLIC;

-- Accounts for an instance's due ticks and starts what may start, in one statement.
--   p_names, p_seen, p_until, p_ttl_ms: per schedule, the watermark the instance read, the one
--     its ticks bring it to (equal: no ticks, only pending runs to start), and its run lease;
--   p_tick_*: per tick, its schedule and time, and what it is: 'scheduled' (on time: runs now,
--     as the overlap policy says), 'catch_up' (missed, to run in turn) or 'missed' (recorded,
--     with p_missed_until and p_missed_count the range it stands for: the last tick and how many,
--     a negative count meaning too many to count).
-- Schedules' rows are locked in name order, and nothing else a claim locks is waited for while
-- it holds one that another claim could want first, so claims never deadlock.
CREATE FUNCTION pglock_cron_claim(p_instance varchar, p_names varchar[], p_seen timestamptz[],
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

REVOKE ALL ON FUNCTION pglock_cron_claim(varchar, varchar[], timestamptz[], timestamptz[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[]) FROM PUBLIC;

-- Renews a run's lease; NULL once the run is no longer running under this token.
CREATE FUNCTION pglock_cron_renew(p_id bigint, p_fencing_token bigint, p_ttl_ms bigint)
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

-- Records how a run ended: p_status 'ran', 'failed' or 'canceled'. Answers whether the schedule
-- has pending runs (the instance claims next at once), or NULL when the run was no longer
-- running under this token (it was abandoned or replaced, and that record stands).
CREATE FUNCTION pglock_cron_finish(p_id bigint, p_fencing_token bigint, p_status text, p_error text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_schedule varchar;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('ran', 'failed', 'canceled') THEN
        RAISE EXCEPTION 'p_status: must be ran, failed or canceled' USING ERRCODE = '22023', COLUMN = 'p_status';
    END IF;
    UPDATE pglock_cron_runs
       SET status = p_status, finished_at = clock_timestamp(), lease_expires_at = NULL, error = p_error
     WHERE id = p_id AND fencing_token = p_fencing_token AND status = 'running'
    RETURNING schedule INTO v_schedule;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN EXISTS (SELECT FROM pglock_cron_runs WHERE schedule = v_schedule AND status = 'pending');
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_finish(bigint, bigint, text, text) FROM PUBLIC;

CREATE FUNCTION pglock_cron_lock(p_name varchar)
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
CREATE FUNCTION pglock_cron_pause(p_name varchar, p_note text, p_by text)
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

-- Resumes a schedule. Ticks that came while it was paused stay skipped.
CREATE FUNCTION pglock_cron_resume(p_name varchar)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pglock_cron_lock(p_name);
    UPDATE pglock_cron_schedules SET paused = false, pause_note = NULL, paused_by = NULL, paused_at = NULL
     WHERE name = p_name;
    PERFORM pg_notify('pglock_cron', json_build_object('op', 'resume', 'schedule', p_name)::text);
END;
$$;

REVOKE ALL ON FUNCTION pglock_cron_resume(varchar) FROM PUBLIC;

-- Asks for a manual run, pending until an instance with the schedule starts it; answers its id.
-- Its scheduled time is when it was asked for; it is never one of the schedule's ticks.
CREATE FUNCTION pglock_cron_trigger(p_name varchar, p_by text)
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
CREATE FUNCTION pglock_cron_backfill(p_name varchar, p_ticks timestamptz[], p_by text)
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
CREATE FUNCTION pglock_cron_collect()
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

COMMIT;
