-- sqlc sees the columns of a function's composite result only when the type is a table's:
-- this describes the type pglock_job_answer, which the migration creates with CREATE TYPE, to
-- sqlc alone. NOT NULL marks what every answer has.
CREATE TABLE pglock_job_answer (
    outcome          text NOT NULL,
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
