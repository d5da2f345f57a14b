-- Back to v0.1.0's tables and types: the functions it did not have go first (what uses the
-- type, and pglock_job_announce, whose result type v0.1.0's cannot replace in place); then
-- v0.1.0's functions are made again from 000001. A claim pending in a transaction under way is
-- not carried over: apply this with no RunTx running.

DROP FUNCTION pglock_cron_define(varchar, varchar, text, text, jsonb, text, text, bigint, bigint, integer, bigint, bigint,
    bigint, timestamptz, timestamptz, integer, integer, boolean, text, text);
DROP FUNCTION pglock_cron_delete(varchar, text, text);
DROP FUNCTION pglock_cron_register_extras(varchar, text, text, text, text, bigint, bigint, integer, varchar,
    bigint, timestamptz, timestamptz, integer, integer);
DROP FUNCTION pglock_cron_check_definition(text, text, text, text, bigint, bigint, integer, bigint, timestamptz,
    timestamptz, integer, integer);
DROP FUNCTION pglock_cron_recorded(pglock_cron_runs, timestamptz);
DROP FUNCTION pglock_cron_claim_reporting(varchar, varchar[], timestamptz[], timestamptz[], bigint[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[], boolean);
DROP FUNCTION pglock_cron_seen_clock(varchar[], varchar, bigint, bigint);
DROP FUNCTION pglock_job_claim_many(varchar, text[], varchar, varchar, bigint, integer, bigint);
DROP FUNCTION pglock_job_finish_many(varchar, text[], bigint[], bigint);
DROP FUNCTION pglock_job_check_claim(varchar, text, varchar, boolean, bigint, bigint, integer, bigint, text, bigint);
DROP FUNCTION pglock_job_claim_in_mode(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint, text, bigint);
DROP FUNCTION pglock_job_cycle_ended(timestamptz, text, timestamptz, timestamptz, text, bigint);
DROP FUNCTION pglock_job_fence(varchar, text, bigint, bigint);
DROP FUNCTION pglock_job_check_debounce(varchar, text, jsonb, bigint, bigint);
DROP FUNCTION pglock_job_debounce(varchar, text, jsonb, bigint, bigint);
DROP FUNCTION pglock_job_debounce_claim(varchar, varchar, bigint, integer);
DROP FUNCTION pglock_job_debounce_next(varchar);
DROP FUNCTION pglock_job_debounce_renew_many(varchar[], text[], bigint[], bigint[]);
DROP FUNCTION pglock_job_debounce_finish(varchar, text, bigint);
DROP FUNCTION pglock_job_debounce_fail(varchar, text, bigint, text, bigint);
DROP FUNCTION pglock_bound_fenced(timestamptz, bigint);
DROP FUNCTION pglock_check_ttls(bigint[]);
DROP FUNCTION pglock_check_grace(bigint);
DROP FUNCTION pglock_rate_take_many(boolean, varchar[], bigint[], integer[], integer[], bigint);
DROP FUNCTION pglock_rate_refund(boolean, varchar, bigint, integer, integer);
DROP FUNCTION pglock_rate_peek(boolean, varchar, bigint, integer);
DROP FUNCTION pglock_rate_reset(boolean, varchar);
DROP FUNCTION pglock_rate_remaining(timestamptz, timestamptz, bigint, integer);
DROP FUNCTION pglock_rate_check(boolean, varchar, bigint, integer, integer);
DROP FUNCTION pglock_rate_check_many(boolean, varchar[], bigint[], integer[], integer[], bigint);
DROP FUNCTION pglock_rate_collect(boolean, timestamptz);
DROP FUNCTION pglock_job_bound_idle(bigint);
DROP FUNCTION pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb, varchar, boolean);
DROP FUNCTION pglock_semaphore_take(varchar, varchar, integer, integer, varchar, integer, bigint, jsonb, varchar, boolean);
DROP FUNCTION pglock_job_window_ok(bigint);
DROP FUNCTION pglock_job_raise_bad_window(bigint);
DROP FUNCTION pglock_job_require_claim(timestamptz, varchar, text);
DROP FUNCTION pglock_job_write_pending(varchar, text, bigint, timestamptz, bigint);
DROP FUNCTION pglock_job_announce(varchar, text);
DROP FUNCTION pglock_job_running(varchar, text);
DROP FUNCTION pglock_wait_many(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_cron_renew_many(bigint[], bigint[], bigint[]);
DROP FUNCTION pglock_job_renew_many(varchar[], text[], bigint[], bigint[]);
DROP FUNCTION pglock_renew_many(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_check_leases(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_check_arrays(text[], integer[]);
DROP FUNCTION pglock_release_after(varchar, varchar, bigint);
DROP FUNCTION pglock_next_token(regclass);
DROP FUNCTION pglock_new_epoch(regclass, bigint);
DROP FUNCTION pglock_timeline();

DROP TYPE pglock_job_pending;
DROP TABLE pglock_job_debounces;
DROP TABLE pglock_instances;

ALTER TABLE pglock_jobs
    ADD CONSTRAINT pglock_jobs_job_key_check CHECK (octet_length(job_key) BETWEEN 1 AND 1024),
    ADD CONSTRAINT pglock_jobs_status_check CHECK (status IN ('running', 'succeeded', 'failed'));

-- v0.1.0 knows no runtime schedule: they go, with their runs.
DELETE FROM pglock_cron_schedules WHERE kind IS NOT NULL;
DROP TABLE pglock_cron_changes;
ALTER TABLE pglock_cron_schedules
    DROP COLUMN kind, DROP COLUMN args, DROP COLUMN ttl_ms, DROP COLUMN timeout_ms, DROP COLUMN jitter_ms,
    DROP COLUMN starts_at, DROP COLUMN ends_at, DROP COLUMN run_limit, DROP COLUMN runs_started,
    DROP COLUMN pause_after_failures, DROP COLUMN failures_in_row, DROP COLUMN revision, DROP COLUMN defined_at,
    ALTER COLUMN last_instance SET NOT NULL,
    ALTER COLUMN last_seen_at SET NOT NULL;
DROP SEQUENCE pglock_cron_revision_seq;

-- v0.1.0 counts a semaphore's holders, one place each, with no key.
ALTER TABLE distributed_locks DROP COLUMN places, DROP COLUMN semaphore_key, DROP COLUMN turn;
ALTER TABLE distributed_lock_waiters DROP COLUMN places, DROP COLUMN semaphore_key, DROP COLUMN turn;
