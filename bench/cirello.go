//go:build cirello

package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"time"

	cirello "cirello.io/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // cirello.io/pglock's New accepts only lib/pq
)

// cirelloLease is the lease cirello.io/pglock is run with, and so how long a waiter sleeps
// between tries (it waits a lease). Its default, 20 s with a heartbeat every 5 s, would leave a
// waiter asleep for 20 s.
const (
	cirelloLease     = time.Second
	cirelloHeartbeat = 250 * time.Millisecond
	cirelloTable     = "cirello_locks"
)

var cirelloDesign = &design{
	name: "cirello.io/pglock",
	note: "`cirello.io/pglock` on lib/pq (its `New` accepts no other driver), lease 1 s with a heartbeat every 250 ms (a waiter sleeps a lease between tries; its default lease is 20 s), `FailIfLocked` for a try",
	open: func(ctx context.Context, e *env, pool *pgxpool.Pool) (locker, error) {
		db, err := sql.Open("postgres", pool.Config().ConnString())
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(int(pool.Config().MaxConns))
		db.SetMaxIdleConns(int(pool.Config().MaxConns)) // database/sql keeps 2 by default: no redialling
		c, err := cirello.New(db, cirello.WithLeaseDuration(cirelloLease),
			cirello.WithHeartbeatFrequency(cirelloHeartbeat), cirello.WithCustomTable(cirelloTable))
		if err != nil {
			db.Close()
			return nil, err
		}
		if err := c.TryCreateTable(); err != nil {
			db.Close()
			return nil, err
		}
		return cirelloLocker{c, db}, nil
	},
	peer: true,
}

// cirelloCommit is the commit of cirello.io/pglock's source that make bench unpacked.
func cirelloCommit() string {
	commit, err := os.ReadFile(".peers/cirello-pglock/COMMIT")
	if err != nil {
		return "of unknown commit"
	}
	return "commit " + strings.TrimSpace(string(commit))
}

// cirelloFillSQL makes live rows in cirello's table for the many-rows scenario.
const cirelloFillSQL = `INSERT INTO ` + cirelloTable + ` (name, record_version_number, owner)
	SELECT 'filler:' || n, n, 'filler' FROM generate_series(1, $1::int) n`

type cirelloLocker struct {
	c  *cirello.Client
	db *sql.DB
}

func (c cirelloLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := c.c.AcquireContext(ctx, name, cirello.FailIfLocked())
	if errors.Is(err, cirello.ErrNotAcquired) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.c.ReleaseContext(ctx, l) }, nil
}

func (c cirelloLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	l, err := c.c.AcquireContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.c.ReleaseContext(ctx, l) }, nil
}

func (c cirelloLocker) close() { c.db.Close() }
