-- Removes what 000003 added, job records included.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_job_collect(integer);
DROP FUNCTION pglock_job_forget(varchar, text);
DROP FUNCTION pglock_job_unawait(varchar, text, varchar);
DROP FUNCTION pglock_job_await(varchar, text, varchar, bigint);
DROP FUNCTION pglock_job_finish_tx(varchar, text, bigint, bigint);
DROP FUNCTION pglock_job_announce(varchar, text);
DROP FUNCTION pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint);
DROP FUNCTION pglock_job_renew(varchar, text, bigint, bigint);
DROP FUNCTION pglock_job_claim(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint);
DROP FUNCTION pglock_job_answer_of(text, pglock_jobs, bigint);
DROP FUNCTION pglock_job_check_key(varchar, text);
DROP FUNCTION pglock_job_lock_key(varchar, text);
DROP TYPE pglock_job_answer;
DROP TABLE pglock_job_waiters;
DROP SEQUENCE pglock_jobs_fencing_token_seq;
DROP TABLE pglock_jobs;

COMMIT;
