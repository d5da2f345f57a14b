-- Removes what 000005 added.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_rate_take(boolean, varchar, bigint, integer, integer, bigint);
DROP TABLE pglock_rate_limits;

COMMIT;
