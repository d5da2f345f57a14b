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

-- SchemaObjects describes pglock's objects in the schema, each by a hash of what defines it,
-- the same whatever the schema's name: functions (their arguments with defaults, result,
-- language, attributes, settings and body), tables, partitions, composite types and sequences
-- (their columns, constraints and partition bounds) and indexes (their definition). Privileges
-- are not compared: they name roles. Names outside the pglock_ prefix are those of
-- @legacy_names (the seed's). It runs as whoever migrates or asks for the status, so, as
-- everything here, it names pg_catalog's functions and operators: a role that may create
-- objects in the schema could define a closer match (a LIKE for two names, say).
-- name: SchemaObjects :many
WITH target AS (
    SELECT n.oid, pg_catalog.quote_ident(n.nspname) AS quoted
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname OPERATOR(pg_catalog.=) @schema::pg_catalog.varchar
),
ours AS (
    SELECT c.oid, c.relname, c.relkind, target.quoted
      FROM pg_catalog.pg_class c, target
     WHERE c.relnamespace OPERATOR(pg_catalog.=) target.oid
       AND c.relname OPERATOR(pg_catalog.<>) 'pglock_schema_migrations'::pg_catalog.name
       AND (c.relname OPERATOR(pg_catalog.~~) 'pglock\_%'::pg_catalog.text
            OR c.relname OPERATOR(pg_catalog.=) ANY (@legacy_names::pg_catalog.varchar[]))
)
SELECT 'function'::pg_catalog.varchar AS kind,
       pg_catalog.concat(p.proname, '(', pg_catalog.pg_get_function_identity_arguments(p.oid), ')')::pg_catalog.varchar AS name,
       pg_catalog.md5(pg_catalog.concat_ws(E'\n', pg_catalog.pg_get_function_arguments(p.oid),
           pg_catalog.pg_get_function_result(p.oid), l.lanname, p.provolatile, p.proisstrict, p.prosecdef, p.proparallel,
           pg_catalog.replace(pg_catalog.array_to_string(p.proconfig, E'\n'),
                              pg_catalog.concat('search_path=', target.quoted, ','), 'search_path=<schema>,'),
           p.prosrc, pg_catalog.pg_get_function_sqlbody(p.oid))) AS hash
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) p.prolang, target
 WHERE p.pronamespace OPERATOR(pg_catalog.=) target.oid
   AND (p.proname OPERATOR(pg_catalog.~~) 'pglock\_%'::pg_catalog.text
        OR p.proname OPERATOR(pg_catalog.=) ANY (@legacy_names::pg_catalog.varchar[]))
UNION ALL
SELECT (CASE WHEN o.relkind OPERATOR(pg_catalog.=) 'S'::pg_catalog."char" THEN 'sequence'
             WHEN o.relkind OPERATOR(pg_catalog.=) 'c'::pg_catalog."char" THEN 'type'
             ELSE 'table' END)::pg_catalog.varchar,
       o.relname::pg_catalog.varchar,
       pg_catalog.md5(pg_catalog.concat_ws(E'\n', o.relkind,
           (SELECT pg_catalog.string_agg(pg_catalog.concat(a.attname, ' ', pg_catalog.format_type(a.atttypid, a.atttypmod),
                                                           CASE WHEN a.attnotnull THEN ' not null' END,
                                                           CASE WHEN d.adbin IS NOT NULL THEN ' default ' END,
                                                           pg_catalog.pg_get_expr(d.adbin, d.adrelid)), E'\n' ORDER BY a.attnum)
              FROM pg_catalog.pg_attribute a
              LEFT JOIN pg_catalog.pg_attrdef d
                ON d.adrelid OPERATOR(pg_catalog.=) a.attrelid AND d.adnum OPERATOR(pg_catalog.=) a.attnum
             WHERE a.attrelid OPERATOR(pg_catalog.=) o.oid AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2
               AND NOT a.attisdropped),
           (SELECT pg_catalog.string_agg(pg_catalog.concat(k.conname, ' ', pg_catalog.pg_get_constraintdef(k.oid)), E'\n' ORDER BY k.conname)
              FROM pg_catalog.pg_constraint k WHERE k.conrelid OPERATOR(pg_catalog.=) o.oid),
           (SELECT pg_catalog.pg_get_expr(c.relpartbound, c.oid) FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) o.oid)))
  FROM ours o
 WHERE o.relkind OPERATOR(pg_catalog.=) ANY ('{r,p,S,c}'::pg_catalog."char"[])
UNION ALL
-- An index's definition names its table with the schema: that name goes, and nothing else.
SELECT 'index'::pg_catalog.varchar, i.relname::pg_catalog.varchar,
       pg_catalog.md5(pg_catalog.replace(pg_catalog.replace(pg_catalog.pg_get_indexdef(x.indexrelid),
           pg_catalog.concat(' ON ONLY ', t.quoted, '.'), ' ON ONLY '), pg_catalog.concat(' ON ', t.quoted, '.'), ' ON '))
  FROM pg_catalog.pg_index x
  JOIN ours t ON t.oid OPERATOR(pg_catalog.=) x.indrelid
  JOIN pg_catalog.pg_class i ON i.oid OPERATOR(pg_catalog.=) x.indexrelid
ORDER BY 1, 2;

-- MayCreateIn says whether the current role may create objects in the schema, as a migration
-- does.
-- name: MayCreateIn :one
SELECT pg_catalog.has_schema_privilege(@schema::pg_catalog.text, 'CREATE') AS may_create,
       CURRENT_USER::pg_catalog.varchar AS role;
