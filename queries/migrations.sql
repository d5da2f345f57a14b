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
