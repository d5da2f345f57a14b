// Package migrations installs pglock's SQL (the *.sql files beside it, in golang-migrate's
// format) into a database, reports what is installed, and mends what was edited by hand.
//
// Each function's body is written once, in functions/*.sql; versions/ holds what each version
// changes in tables and types. The files golang-migrate applies are generated from both by
// make generate: a version's up file makes its changes and then every function again, with
// CREATE OR REPLACE, and records its version; its down file reverts the changes and makes the
// previous version's functions again (docs/sql.md).
//
// Up, Down, Version and Repair work on the schema a pool's connections see first: everything
// goes into the first existing schema of their search_path (PostgreSQL skips names of schemas
// that do not exist, so create the schema first), and golang-migrate records the version in
// the table pglock_schema_migrations there, never in the application's own schema_migrations.
// Any number of processes may call Up at once: an advisory lock of pglock's serializes them,
// one applies the files and the others find nothing left to do. Up refuses, changing nothing,
// a schema whose version is dirty or newer than these files; and with files to apply, one whose
// objects drifted from what their version made (Version names them; Repair makes the functions
// again) or a role that may not create objects in it.
//
// The same files can be applied without Go, in order, with `psql -f` (one file per version)
// or with the golang-migrate CLI (-database 'pgx5://...?x-migrations-table=pglock_schema_migrations').
package migrations
