// Package testdb gives each test a PostgreSQL database of its own, migrated (or not, or into a
// schema of its choosing), and lets tests run in parallel.
//
// The server is found once per test binary, in this order: the URL in PGLOCK_TEST_DATABASE_URL,
// then DATABASE_URL (a superuser's, or a role that may create databases); a throwaway cluster
// started from local PostgreSQL binaries (initdb and postgres on PATH or in the usual install
// directories; as root they run as the postgres user). With neither, Main fails the package's
// run at once with one line saying how to provide one. Programs (Throwaway) may add a Fallback,
// such as make demo's container.
//
// Isolation is a database per test, cloned from a migrated template database; see New. Every
// package that uses New calls Main from its TestMain.
package testdb
