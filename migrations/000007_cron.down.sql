-- Removes what 000007 added, schedules and run history included.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_cron_collect();
DROP FUNCTION pglock_cron_backfill(varchar, timestamptz[], text);
DROP FUNCTION pglock_cron_trigger(varchar, text);
DROP FUNCTION pglock_cron_resume(varchar);
DROP FUNCTION pglock_cron_pause(varchar, text, text);
DROP FUNCTION pglock_cron_lock(varchar);
DROP FUNCTION pglock_cron_finish(bigint, bigint, text, text);
DROP FUNCTION pglock_cron_renew(bigint, bigint, bigint);
DROP FUNCTION pglock_cron_claim(varchar, varchar[], timestamptz[], timestamptz[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[]);
DROP FUNCTION pglock_cron_start(varchar, bigint, timestamptz, text, varchar, bigint, timestamptz);
DROP FUNCTION pglock_cron_seen(varchar[], varchar);
DROP FUNCTION pglock_cron_register(varchar, text, text, text, text, bigint, bigint, integer, varchar);
DROP FUNCTION pglock_cron_check(varchar, varchar);
DROP TYPE pglock_cron_claimed;
DROP SEQUENCE pglock_cron_runs_fencing_token_seq;
DROP TABLE pglock_cron_runs;
DROP TABLE pglock_cron_schedules;

COMMIT;
