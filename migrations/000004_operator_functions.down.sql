-- Removes every object of 000004. Without IF EXISTS: a schema that drifted should fail loudly.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_gc();
DROP FUNCTION force_release_lock(varchar);

COMMIT;
