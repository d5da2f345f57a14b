-- These run as the migrating role on the caller's pool, whose search_path may put the target
-- schema before pg_catalog: where a role allowed to create objects could define closer matches.
-- So every function, type and operator here is pg_catalog's by name.

-- MigrationVersion reads the version table; VersionTableTrust first says whether to, and
-- SearchOnlySchema makes the name find the table VersionTableTrust looked at.
-- name: MigrationVersion :one
SELECT version, dirty FROM pglock_schema_migrations LIMIT 1;

-- SearchOnlySchema confines the rest of the transaction to the schema, after pg_catalog, with
-- pg_temp last: searched first for tables unless named, pg_temp could hold one of that name,
-- left by code the session ran as another role.
-- name: SearchOnlySchema :exec
SELECT pg_catalog.set_config('search_path', pg_catalog.format('%I, pg_temp', @schema::pg_catalog.varchar), true);

-- MigrationScope names what a migration lock must cover: the migrations of one schema.
-- name: MigrationScope :one
SELECT pg_catalog.current_database() AS database, pg_catalog.current_schema() AS schema;

-- LockMigrations waits for other pglock migrators of the same schema; canceling the wait
-- (closing the connection) leaves nothing behind.
-- name: LockMigrations :exec
SELECT pg_catalog.pg_advisory_lock(@key::pg_catalog.int8);

-- name: UnlockMigrations :exec
SELECT pg_catalog.pg_advisory_unlock(@key::pg_catalog.int8);

-- VersionTableTrust describes the schema's version table, if it has one (no row otherwise).
-- golang-migrate reads and writes it as the migrating role, so a view, or a table whose owner
-- could give it triggers, rules or policies, would run that owner's code as this role. It is
-- trusted as a plain table owned by the migrating role or by a role with the schema owner's
-- rights (superusers have every role's): a role that may only create objects in the schema
-- is neither.
-- name: VersionTableTrust :one
SELECT (c.relkind OPERATOR(pg_catalog.=) 'r'
        AND (c.relowner OPERATOR(pg_catalog.=) (SELECT u.oid FROM pg_catalog.pg_roles u
                                                 WHERE u.rolname OPERATOR(pg_catalog.=) CURRENT_USER)
             OR pg_catalog.pg_has_role(c.relowner, n.nspowner, 'USAGE')))::pg_catalog.bool AS trusted,
       o.rolname::pg_catalog.varchar AS owner
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
  JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner
 WHERE n.nspname OPERATOR(pg_catalog.=) @schema::pg_catalog.varchar
   AND c.relname OPERATOR(pg_catalog.=) @table_name::pg_catalog.varchar;

-- ConfineMigrator readies a connection of golang-migrate's. Its own statements (an untyped
-- pg_advisory_lock($1), count(1)) would call a closer match that a role allowed to create in the
-- target schema defined there, as the migrating role: so the session searches pg_catalog alone,
-- and pglock.schema tells the files where to install (they fall back to current_schema()).
-- name: ConfineMigrator :exec
SELECT pg_catalog.set_config('pglock.schema', @schema::pg_catalog.varchar, false),
       pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false);
