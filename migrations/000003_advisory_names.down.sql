-- Removes every object of 000003. Without IF EXISTS: a schema that drifted should fail loudly.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_session_holds_advisory(boolean, boolean, integer, integer, bigint);
DROP FUNCTION advisory_locks();
DROP FUNCTION register_advisory_name(text, text);
DROP TABLE advisory_lock_names;
DROP FUNCTION pglock_advisory_key(text, text);

COMMIT;
