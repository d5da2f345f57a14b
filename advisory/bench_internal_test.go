package advisory

import (
	"context"
	"testing"
	"time"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
)

// BenchmarkTryLockUnlock: a session's TryLock and Unlock against the raw pair of statements
// sent on the very connection the session pins, in the same run: on two connections the
// comparison would measure mostly which core each backend process happens to run on. Goal:
// ratio ≤ 1.10.
func BenchmarkTryLockUnlock(b *testing.B) {
	d := testdb.New(b, nil)
	ctx := context.Background()
	s, err := Open(ctx, d.Pool, &Config{HealthCheckInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	key := StringKey("bench")
	conn := s.conn.Conn()
	benchkit.Compare(b,
		benchkit.Case{Name: "raw-sql", Run: func() error {
			if _, err := conn.Exec(ctx, "SELECT pg_try_advisory_lock($1)", key.id); err != nil {
				return err
			}
			_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key.id)
			return err
		}},
		benchkit.Case{Name: "session", Run: func() error {
			if err := s.TryLock(ctx, key); err != nil {
				return err
			}
			return s.Unlock(ctx, key)
		}},
	)
}
