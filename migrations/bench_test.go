package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/db"
	"github.com/pglock/pglock/internal/testdb"
)

// The baseline: what a team writes by hand without pglock, the seed's upsert (its token drawn
// in VALUES) and a delete, sent as plain statements.
const (
	rawUpsertSQL = `INSERT INTO distributed_locks AS l (lock_name, holder_id, fencing_token, acquired_at, expires_at)
		VALUES ($1, $2, nextval('distributed_locks_fencing_token_seq'), clock_timestamp(), clock_timestamp() + interval '30 seconds')
		ON CONFLICT (lock_name) DO UPDATE
			SET holder_id = excluded.holder_id, fencing_token = excluded.fencing_token,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
			WHERE l.holder_id = excluded.holder_id OR l.expires_at <= clock_timestamp()`
	rawDeleteSQL = "DELETE FROM distributed_locks WHERE lock_name = $1 AND holder_id = $2"
)

// BenchmarkAcquireRelease: an uncontended acquire and release, durable commits, one connection.
func BenchmarkAcquireRelease(b *testing.B) {
	conn := benchConn(b)
	ctx := context.Background()
	q := db.New(db.Translating(conn))
	exec := func(sql string, args ...any) error { _, err := conn.Exec(ctx, sql, args...); return err }

	testdb.Compare(b,
		testdb.Case{Name: "raw-sql", Run: func() error {
			if err := exec(rawUpsertSQL, "raw", "h"); err != nil {
				return err
			}
			return exec(rawDeleteSQL, "raw", "h")
		}},
		testdb.Case{Name: "seed-functions", Run: func() error {
			if err := exec("SELECT acquire_lock($1, $2, 30)", "seed", "h"); err != nil {
				return err
			}
			return exec("SELECT release_lock($1, $2)", "seed", "h")
		}},
		testdb.Case{Name: "sqlc-queries", Run: func() error {
			if _, err := q.AcquireLock(ctx, db.AcquireLockParams{LockName: "sqlc", HolderID: "h", TtlMs: 30000, Metadata: []byte(`{}`)}); err != nil {
				return err
			}
			_, err := q.ReleaseLock(ctx, db.ReleaseLockParams{LockName: "sqlc", HolderID: "h"})
			return err
		}},
	)
}

// BenchmarkFailedAcquire: acquiring a name someone else holds, against the floor of a
// primary-key read of the lock row and the raw upsert, which locks the row and flushes a commit.
func BenchmarkFailedAcquire(b *testing.B) {
	conn := benchConn(b)
	ctx := context.Background()
	q := db.New(db.Translating(conn))
	if _, err := conn.Exec(ctx, "SELECT acquire_lock('held', 'holder', 3600)"); err != nil {
		b.Fatal(err)
	}
	exec := func(sql string, args ...any) error { _, err := conn.Exec(ctx, sql, args...); return err }

	testdb.Compare(b,
		testdb.Case{Name: "pk-read", Run: func() error {
			return exec("SELECT holder_id, expires_at FROM distributed_locks WHERE lock_name = $1", "held")
		}},
		testdb.Case{Name: "sqlc-acquire", Run: func() error {
			_, err := q.AcquireLock(ctx, db.AcquireLockParams{LockName: "held", HolderID: "other", TtlMs: 30000, Metadata: []byte(`{}`)})
			return err
		}},
		testdb.Case{Name: "raw-upsert", Run: func() error { return exec(rawUpsertSQL, "held", "other") }},
	)
}

// benchConn is one connection of a fresh migrated database, shared by every contender so that
// none of them pays for the pool differently.
func benchConn(b *testing.B) *pgxpool.Conn {
	b.Helper()
	conn, err := testdb.New(b, nil).Pool.Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	return conn
}
