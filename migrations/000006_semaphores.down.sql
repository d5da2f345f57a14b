-- Removes what 000006 added.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_semaphore_attempt(varchar, varchar, integer, bigint, jsonb, varchar, boolean);
DROP INDEX distributed_locks_semaphore_idx;

COMMIT;
