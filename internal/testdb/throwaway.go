package testdb

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Throwaway makes a migrated database for a program (make demo) as New makes one for a test,
// from the same sources: a URL in PGLOCK_TEST_DATABASE_URL or DATABASE_URL, a throwaway cluster
// from local PostgreSQL binaries, or fallback (make demo's starts a container). done drops the
// database, and the template it was cloned from if Throwaway built it, and stops any server
// Throwaway started, whatever fails on the way (a server already shut down by the terminal's
// Ctrl-C, say). With no source at all the error matches ErrNoServer.
func Throwaway(ctx context.Context, fallback Fallback) (d *DB, done func(), err error) {
	srv, err := connect(ctx, fallback)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := templateName(Options{})
	if err != nil {
		srv.stop()
		return nil, nil, err
	}
	var existed bool
	srv.admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", tmpl).Scan(&existed)
	stopServer := func() {
		if !existed {
			runRecovering(func() {
				srv.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{tmpl}.Sanitize()+" WITH (FORCE)")
			})
		}
		srv.admin.Close()
		srv.stop()
	}
	d, tb, err := newUntested(srv)
	if err != nil {
		stopServer()
		return nil, nil, err
	}
	return d, func() { tb.cleanup(); stopServer() }, nil
}
