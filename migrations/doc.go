// Package migrations installs pglock's SQL (the *.sql files beside it, in golang-migrate's
// format) into a database, and reports what is installed.
//
// Up, Down and Version work on the schema a pool's connections see first: everything goes
// into the first existing schema of their search_path (PostgreSQL skips names of schemas
// that do not exist, so create the schema first), and golang-migrate records the version in
// the table pglock_schema_migrations there, never in the application's own schema_migrations.
// Any number of processes may call Up at once: an advisory lock of pglock's serializes them,
// one applies the files and the others find nothing left to do.
//
// The same files can be applied without Go, in order, with `psql -f` or with the
// golang-migrate CLI (-database 'pgx5://...?x-migrations-table=pglock_schema_migrations').
package migrations
