// Package databasesql tests pglock's database/sql forms (tablelock.Lock.FenceSQL,
// leader.Elector.FenceSQL, jobs.Deduper.RunTxSQL, advisory's XactLockSQL family) with real
// drivers: pgx's stdlib and lib/pq, on the guarantees their pgx forms keep, and SQLite for a
// driver that is not PostgreSQL's. It is a module of its own so that the drivers it tests with
// never enter the library's module graph; its example is the one docs/databasesql.md shows.
package databasesql
