package testdb

import (
	"context"
	"fmt"
	"slices"
)

// ErrNoServer means no way to reach or start PostgreSQL was found.
var ErrNoServer = errNoServer

// Throwaway makes a migrated database for a program (make demo) as New makes one for a test,
// from the same sources: a URL in PGLOCK_TEST_DATABASE_URL or DATABASE_URL, a throwaway cluster
// from local PostgreSQL binaries, or a container. done drops the database and stops any server
// Throwaway started. With no source at all the error matches ErrNoServer.
func Throwaway(ctx context.Context) (d *DB, done func(), err error) {
	srv, err := connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	tb := &exampleTB{}
	stop := func() {
		for _, cleanup := range slices.Backward(tb.cleanups) {
			cleanup()
		}
		srv.admin.Close()
		srv.stop()
	}
	defer func() {
		if v := recover(); v != nil { // exampleTB fails by panicking
			stop()
			d, done, err = nil, nil, fmt.Errorf("%v", v)
		}
	}()
	return newOn(tb, srv, &Options{}), stop, nil
}
