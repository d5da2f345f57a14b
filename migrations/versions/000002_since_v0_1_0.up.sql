-- What changed in tables and types since v0.1.0 (000001); the functions are in functions/.
--
-- Schedulers report their host clock against the database's, with the schedules they still
-- have (pglock_cron_seen_clock), for operators: pglock_instances.
--
-- A RunTx delivery writes its job's record once: a transactional claim of a key without a record
-- leaves the record it would write in the transaction-local setting pglock.job_claim
-- (pglock_job_pending's text form), and pglock_job_finish_tx inserts it finished. The CHECK
-- constraints of pglock_jobs go: the functions that alone write it check what they write, and
-- PostgreSQL reads a CHECK's expression anew in every statement that inserts or updates (a
-- tenth of a claim's time). pglock_job_announce now returns whether it sent an announcement,
-- so that callers can call it in an expression: a result type cannot be replaced in place.

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
