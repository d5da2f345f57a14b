package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/testdb"
)

// BenchmarkAcquireRelease: an uncontended acquire and release, durable commits, one connection.
func BenchmarkAcquireRelease(b *testing.B) {
	conn := benchConn(b)
	ctx := context.Background()
	q := db.New(db.Translating(conn))
	exec := func(sql string, args ...any) error { _, err := conn.Exec(ctx, sql, args...); return err }

	benchkit.Compare(b,
		benchkit.Case{Name: "raw-sql", Run: func() error {
			if err := exec(benchkit.RawUpsertSQL, "raw", "h"); err != nil {
				return err
			}
			return exec(benchkit.RawDeleteSQL, "raw", "h")
		}},
		benchkit.Case{Name: "seed-functions", Run: func() error {
			if err := exec("SELECT acquire_lock($1, $2, 30)", "seed", "h"); err != nil {
				return err
			}
			return exec("SELECT release_lock($1, $2)", "seed", "h")
		}},
		benchkit.Case{Name: "sqlc-queries", Run: func() error {
			if _, err := q.TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "sqlc", HolderID: "h", TtlMs: 30000, Metadata: []byte(`{}`)}); err != nil {
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

	benchkit.Compare(b,
		benchkit.Case{Name: "pk-read", Run: func() error {
			return exec(benchkit.PKReadSQL, "held")
		}},
		benchkit.Case{Name: "sqlc-acquire", Run: func() error {
			_, err := q.TryAcquireLock(ctx, db.TryAcquireLockParams{LockName: "held", HolderID: "other", TtlMs: 30000, Metadata: []byte(`{}`)})
			return err
		}},
		benchkit.Case{Name: "raw-upsert", Run: func() error { return exec(benchkit.RawUpsertSQL, "held", "other") }},
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
