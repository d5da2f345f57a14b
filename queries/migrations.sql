-- name: MigrationVersion :one
SELECT version, dirty FROM pglock_schema_migrations LIMIT 1;

-- MigrationScope names what a migration lock must cover: the migrations of one schema.
-- name: MigrationScope :one
SELECT current_database()::text AS database, current_schema()::text AS schema;

-- LockMigrations waits for other pglock migrators of the same schema; canceling the wait
-- (closing the connection) leaves nothing behind.
-- name: LockMigrations :exec
SELECT pg_advisory_lock(@key::bigint);

-- name: UnlockMigrations :exec
SELECT pg_advisory_unlock(@key::bigint);

-- ConfineMigrator readies a connection of golang-migrate's. Its own statements (an untyped
-- pg_advisory_lock($1), count(1)) would call a closer match that a role allowed to create in the
-- target schema defined there, as the migrating role: so the session searches pg_catalog alone,
-- and pglock.schema tells the files where to install (they fall back to current_schema()).
-- name: ConfineMigrator :exec
SELECT pg_catalog.set_config('pglock.schema', @schema::text, false),
       pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
