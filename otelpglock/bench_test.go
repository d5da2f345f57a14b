package otelpglock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/benchkit"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/tablelock"
)

// BenchmarkOverhead: the same operations without an Observer and with the adapter on the SDK
// (an in-memory reader, every span sampled), interleaved round by round in one run. Goal: each
// "observed/plain" ratio ≤ 1.05.
func BenchmarkOverhead(b *testing.B) {
	d := testdb.New(b, nil)
	in := newInstanceB(b)
	ctx := context.Background()

	b.Run("TryAcquireRelease", func(b *testing.B) {
		lockCase := func(name string, cfg *tablelock.Config) benchkit.Case {
			l, err := tablelock.New(d.Pool, cfg)
			require.NoError(b, err)
			b.Cleanup(func() { l.Close(context.Background()) })
			return benchkit.Case{Name: name, Run: func() error {
				lk, err := l.TryAcquire(ctx, name, nil)
				if err != nil {
					return err
				}
				return lk.Release(ctx)
			}}
		}
		benchkit.Compare(b, lockCase("plain", nil), lockCase("observed", &tablelock.Config{Observer: in.obs}))
	})

	b.Run("RunTx", func(b *testing.B) {
		runTxCase := func(name string, cfg *jobs.Config) benchkit.Case {
			dd, err := jobs.New(d.Pool, cfg)
			require.NoError(b, err)
			run, n := time.Now().UnixNano(), 0 // keys of this run alone: each delivery runs
			return benchkit.Case{Name: name, Run: func() error {
				n++
				_, err := dd.RunTx(ctx, fmt.Sprintf("%s:%d:%d", name, run, n), nil, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "SELECT 1")
					return err
				})
				return err
			}}
		}
		benchkit.Compare(b, runTxCase("plain", &jobs.Config{Scope: "plain"}), runTxCase("observed", &jobs.Config{Scope: "observed", Observer: in.obs}))
	})
}

// BenchmarkRenewalAllocs: an explicit renewal (the heartbeat's path) with and without the
// adapter; allocs/op must be the same: a renewal that succeeds tells the Observer nothing.
func BenchmarkRenewalAllocs(b *testing.B) {
	d := testdb.New(b, nil)
	in := newInstanceB(b)
	ctx := context.Background()
	for name, cfg := range map[string]*tablelock.Config{"plain": {}, "observed": {Observer: in.obs}} {
		b.Run(name, func(b *testing.B) {
			l, err := tablelock.New(d.Pool, cfg)
			require.NoError(b, err)
			defer l.Close(ctx)
			lk, err := l.TryAcquire(ctx, "renewed-"+name, nil)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if err := lk.Extend(ctx, time.Minute); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
