-- Reverts 000004: leases renew one statement each again (the Go side of a release before it).
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_job_running(varchar, text);
DROP FUNCTION pglock_wait_many(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_cron_renew_many(bigint[], bigint[], bigint[]);
DROP FUNCTION pglock_job_renew_many(varchar[], text[], bigint[], bigint[]);
DROP FUNCTION pglock_renew_many(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_check_leases(varchar[], varchar[], bigint[]);
DROP FUNCTION pglock_check_arrays(text[], integer[]);

COMMIT;
