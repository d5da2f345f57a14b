-- Removes every object of 000001, functions before what they use. Without IF EXISTS: a schema
-- that drifted should fail loudly.
BEGIN;

SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', coalesce(pg_catalog.current_setting('pglock.schema', true), pg_catalog.current_schema())), true);

DROP FUNCTION pglock_session_holds_advisory(boolean, boolean, integer, integer, bigint);
DROP FUNCTION advisory_locks();
DROP FUNCTION register_advisory_name(text, text);
DROP FUNCTION pglock_advisory_key(text, text);
DROP FUNCTION pglock_gc();
DROP FUNCTION force_release_lock(varchar);
DROP FUNCTION release_lock(varchar, varchar);
DROP FUNCTION extend_lock(varchar, varchar, integer);
DROP FUNCTION extend_lock_ms(varchar, varchar, bigint);
DROP FUNCTION acquire_lock(varchar, varchar, integer, jsonb);
DROP FUNCTION acquire_lock_ms(varchar, varchar, bigint, jsonb);
DROP FUNCTION verify_fence(varchar, bigint);
DROP FUNCTION pglock_release(varchar, varchar);
DROP FUNCTION pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean);
DROP FUNCTION pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean);
DROP FUNCTION pglock_check_name_and_holder(varchar, varchar);
DROP FUNCTION pglock_check_schema_is_safe();
DROP TYPE pglock_acquisition;
DROP TABLE advisory_lock_names;
DROP TABLE distributed_lock_waiters;
DROP SEQUENCE distributed_locks_fencing_token_seq;
DROP TABLE distributed_locks;

COMMIT;
