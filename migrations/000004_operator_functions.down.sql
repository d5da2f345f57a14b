-- Removes every object of 000004. Without IF EXISTS: a schema that drifted should fail loudly.
BEGIN;

DROP FUNCTION pglock_gc();
DROP FUNCTION force_release_lock(varchar);

COMMIT;
