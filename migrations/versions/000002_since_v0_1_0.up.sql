-- What changed in tables and types since v0.1.0 (000001); the functions are in functions/.
--
-- Schedulers report their host clock against the database's, with the schedules they still
-- have (pglock_cron_seen_clock), for operators: pglock_instances.
--
-- Schedules defined at runtime (pglock_cron_define) are rows of pglock_cron_schedules with a
-- kind, the name of the handler that runs them, and arguments; every schedule gains the spec
-- extras (jitter, start and end, a run limit, a pause after failures in a row), a revision that
-- claims check, and its changes are kept in pglock_cron_changes. A runtime schedule no instance
-- has seen yet has no last instance.
--
-- Debounced keys (pglock_job_debounce) are rows of pglock_job_debounces: the pending cycle of
-- deliveries and the run under way, each with their own fields.
--
-- A RunTx delivery writes its job's record once: a transactional claim of a key without a record
-- leaves the record it would write in the transaction-local setting pglock.job_claim
-- (pglock_job_pending's text form), and pglock_job_finish_tx inserts it finished. The CHECK
-- constraints of pglock_jobs go: the functions that alone write it check what they write, and
-- PostgreSQL reads a CHECK's expression anew in every statement that inserts or updates (a
-- tenth of a claim's time). pglock_job_announce now returns whether it sent an announcement,
-- so that callers can call it in an expression: a result type cannot be replaced in place.
--
-- A semaphore's holder takes one or more of its places and counts against a key (a tenant), and
-- so does a waiter (pglock_semaphore_take): each row says how many places and which key, and a
-- waiter's its turn in the queue (a holder's, the turn it was admitted at).

-- Each scheduler's host clock, as it last measured it against the database's: what operators
-- see of an instance's health (the console's overview). A row not refreshed for a day is
-- deleted by the next report.
CREATE TABLE pglock_instances (
    instance        varchar(255) PRIMARY KEY,
    clock_offset_us bigint       NOT NULL, -- the database's clock minus the instance's host's
    uncertainty_us  bigint       NOT NULL, -- half the round trip of the measurement
    seen_at         timestamptz  NOT NULL
);

ALTER TABLE pglock_jobs DROP CONSTRAINT pglock_jobs_job_key_check, DROP CONSTRAINT pglock_jobs_status_check;

DROP FUNCTION pglock_job_announce(varchar, text);

-- A claim inside a transaction that has not written its record yet. Its text form, in
-- pglock.job_claim, reads back the same whatever the session's DateStyle or TimeZone: the
-- start is in microseconds since the epoch.
CREATE TYPE pglock_job_pending AS (
    scope         varchar(255),
    job_key       text,
    holder_id     varchar(255),
    instance      varchar(255),
    fencing_token bigint,
    started_us    bigint,
    fingerprint   text,
    window_ms     bigint
);

-- Revisions of schedules' definitions, from one sequence: the largest and the count of a kind's
-- rows change with any define, update or delete, which is how an instance that cannot LISTEN
-- finds out.
CREATE SEQUENCE pglock_cron_revision_seq;

ALTER TABLE pglock_cron_schedules
    ADD COLUMN kind                 varchar(255), -- a runtime schedule's handler; NULL: defined in code
    ADD COLUMN args                 jsonb,        -- a runtime schedule's arguments
    ADD COLUMN ttl_ms               bigint,       -- a runtime schedule's run lease and timeout (code keeps its own)
    ADD COLUMN timeout_ms           bigint,
    ADD COLUMN jitter_ms            bigint  NOT NULL DEFAULT 0,
    ADD COLUMN starts_at            timestamptz,
    ADD COLUMN ends_at              timestamptz,
    ADD COLUMN run_limit            integer,      -- runs of its ticks before it is finished; NULL: no limit
    ADD COLUMN runs_started         bigint  NOT NULL DEFAULT 0, -- runs of its ticks started while it has a run limit
    ADD COLUMN pause_after_failures integer,      -- failed runs in a row that pause it; NULL: never
    ADD COLUMN failures_in_row      integer NOT NULL DEFAULT 0,
    ADD COLUMN revision             bigint  NOT NULL DEFAULT nextval('pglock_cron_revision_seq'),
    ADD COLUMN defined_at           timestamptz,  -- when a runtime schedule's definition was last written
    ALTER COLUMN last_instance DROP NOT NULL,
    ALTER COLUMN last_seen_at DROP NOT NULL;

CREATE INDEX pglock_cron_schedules_kind ON pglock_cron_schedules (kind, revision) WHERE kind IS NOT NULL;

-- Who defined, changed or deleted a runtime schedule, when, why, and the definition it left
-- (NULL for a delete). Kept after the schedule is deleted.
CREATE TABLE pglock_cron_changes (
    id         bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule   varchar(255) NOT NULL,
    op         text         NOT NULL CHECK (op IN ('define', 'update', 'delete')),
    definition jsonb,
    changed_by text,
    note       text,
    changed_at timestamptz  NOT NULL
);

CREATE INDEX pglock_cron_changes_schedule ON pglock_cron_changes (schedule, id);

-- Debounced job keys: a burst of deliveries of a key is coalesced into one run, with the latest
-- payload, once the key has been quiet for a while or has waited its maximum since the burst's
-- first delivery (pglock_job_debounce). A row holds the pending cycle (deliveries since the last
-- claim; none when deliveries is 0) and the run under way (run_token not NULL), apart: what is
-- delivered while a key runs waits for the next run. ready_at is when a runner should claim it:
-- the pending cycle's due time, or, while a run is under way, its lease's expiry (a run whose
-- runner vanished is run again, with its payload and deliveries).
CREATE TABLE pglock_job_debounces (
    scope            varchar(255) NOT NULL,
    job_key          text         NOT NULL,
    payload          jsonb,                 -- the latest pending delivery's
    deliveries       integer      NOT NULL, -- pending deliveries coalesced
    first_at         timestamptz,           -- the pending cycle's first delivery
    last_at          timestamptz,           -- and its latest
    due_at           timestamptz,           -- least(last_at + quiet, first_at + max wait)
    run_payload      jsonb,
    run_deliveries   integer,
    run_first_at     timestamptz,
    run_token        bigint,                -- from pglock_jobs_fencing_token_seq
    run_attempts     integer,
    run_instance     varchar(255),
    run_started_at   timestamptz,
    lease_expires_at timestamptz,
    last_error       text,                  -- of the run's last failed attempt
    ready_at         timestamptz,
    PRIMARY KEY (scope, job_key)
);

-- Runners claim, and sleep until, the earliest ready key of their scope.
CREATE INDEX pglock_job_debounces_ready ON pglock_job_debounces (scope, ready_at);

-- The places a semaphore's holder or waiter takes, and the key it counts against: 1 and '' for
-- every other row (pglock_semaphore_take).
ALTER TABLE distributed_locks
    ADD COLUMN places        integer      NOT NULL DEFAULT 1,
    ADD COLUMN semaphore_key varchar(255) NOT NULL DEFAULT '',
    ADD COLUMN turn          bigint       NOT NULL DEFAULT 0; -- the turn a semaphore's holder was admitted at
ALTER TABLE distributed_lock_waiters
    ADD COLUMN places        integer      NOT NULL DEFAULT 1,
    ADD COLUMN semaphore_key varchar(255) NOT NULL DEFAULT '',
    ADD COLUMN turn          bigint       NOT NULL DEFAULT 0; -- a semaphore's waiter's turn

-- A semaphore's queue in turns, and each key's waiters in it. Partial: table locks' queues do
-- not maintain them.
CREATE INDEX distributed_lock_waiters_turn_idx ON distributed_lock_waiters (lock_name, turn, waiter_seq)
 WHERE lock_name ~>=~ 'pglock.semaphore/' AND lock_name ~<~ 'pglock.semaphore0';
CREATE INDEX distributed_lock_waiters_key_idx ON distributed_lock_waiters (lock_name, semaphore_key, waiter_seq)
 WHERE lock_name ~>=~ 'pglock.semaphore/' AND lock_name ~<~ 'pglock.semaphore0';
