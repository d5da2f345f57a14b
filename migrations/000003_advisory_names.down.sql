-- Removes every object of 000003. Without IF EXISTS: a schema that drifted should fail loudly.
BEGIN;

DROP FUNCTION pglock_session_holds_advisory(boolean, boolean, integer, integer, bigint);
DROP FUNCTION advisory_locks();
DROP FUNCTION register_advisory_name(text, text);
DROP TABLE advisory_lock_names;
DROP FUNCTION pglock_advisory_key(text, text);

COMMIT;
