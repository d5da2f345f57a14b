-- Reverts 000005: locks are released at once again (the Go side of a release before it).
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_release_after(varchar, varchar, bigint);

COMMIT;
