-- name: MigrationVersion :one
SELECT version, dirty FROM pglock_schema_migrations LIMIT 1;
