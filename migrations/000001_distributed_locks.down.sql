-- Removes every object of 000001. Without IF EXISTS: a schema that drifted should fail loudly.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION extend_lock(varchar, varchar, integer);
DROP FUNCTION acquire_lock(varchar, varchar, integer, jsonb);
DROP FUNCTION release_lock(varchar, varchar);
DROP FUNCTION extend_lock_ms(varchar, varchar, bigint);
DROP FUNCTION acquire_lock_ms(varchar, varchar, bigint, jsonb);
DROP FUNCTION pglock_check_name_and_holder(varchar, varchar);
DROP FUNCTION pglock_check_schema_is_safe();
DROP SEQUENCE distributed_locks_fencing_token_seq;
DROP TABLE distributed_locks;

COMMIT;
