-- sqlc sees the columns of a function's composite result only when the type is a table's:
-- this describes the type pglock_cron_claimed, which the migration creates with CREATE TYPE,
-- to sqlc alone. NOT NULL marks what every answer has.
CREATE TABLE pglock_cron_claimed (
    outcome          text         NOT NULL,
    schedule         varchar(255) NOT NULL,
    id               bigint,
    scheduled_time   timestamptz,
    kind             text,
    attempt          integer,
    fencing_token    bigint,
    lease_expires_at timestamptz,
    accounted_until  timestamptz,
    db_now           timestamptz  NOT NULL
);
