package ratelimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/ratelimit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// One event an hour, five at once: within a test only the burst fits.
var hourly = ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 5}

func TestLimitIsExactAcrossInstances(t *testing.T) {
	t.Parallel()
	for _, unlogged := range []bool{false, true} {
		t.Run(fmt.Sprint("unlogged=", unlogged), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			var limiters []*ratelimit.Limiter
			for range 3 {
				l, err := ratelimit.New(d.NewPool(t, nil), &ratelimit.Config{Unlogged: unlogged})
				require.NoError(t, err)
				limiters = append(limiters, l)
			}
			var allowed atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 60 {
				wg.Go(func() {
					<-start
					res, err := limiters[i%3].Allow(context.Background(), "partner-api", hourly)
					assert.NoError(t, err)
					if res.Allowed {
						allowed.Add(1)
					} else {
						assert.Greater(t, res.RetryAfter, 59*time.Minute, "a denial says how long to wait")
						assert.LessOrEqual(t, res.RetryAfter, time.Hour)
					}
				})
			}
			close(start)
			wg.Wait()
			require.Equal(t, int32(5), allowed.Load(), "exactly the burst, across 3 pools")
			var persistence string
			require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT c.relpersistence FROM pglock_rate_limits r
				JOIN pg_class c ON c.oid = r.tableoid WHERE r.rate_key = 'partner-api'`).Scan(&persistence))
			if unlogged {
				require.Equal(t, "u", persistence)
			} else {
				require.Equal(t, "p", persistence)
			}
		})
	}
}

func TestAllowCountsRemainingAndKeysAreIndependent(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l, err := ratelimit.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	for want := 4; want >= 0; want-- {
		res, err := l.Allow(ctx, "a", hourly)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		require.Equal(t, want, res.Remaining)
	}
	res, err := l.Allow(ctx, "a", hourly)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	res, err = l.Allow(ctx, "b", hourly)
	require.NoError(t, err)
	require.True(t, res.Allowed, "another key has its own budget")
}

func TestWaitReservesTheNextSlot(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l, err := ratelimit.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	limit := ratelimit.Limit{Rate: 5, Per: time.Second, Burst: 1} // one every 200 ms
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { assert.NoError(t, l.Wait(ctx, "k", limit)) })
	}
	wg.Wait()
	require.GreaterOrEqual(t, time.Since(start), 390*time.Millisecond, "3 events, one every 200 ms, the first at once")

	// A slot past the deadline is refused at once, and not reserved: a second caller is told
	// the same wait, not one an hour longer. The deadline is seconds away and the slot an hour,
	// so that a slow round trip on a busy machine cannot reach the deadline first.
	hourly := ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}
	require.NoError(t, l.Wait(ctx, "hourly", hourly))
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var retryAfter [2]time.Duration
	for i := range retryAfter {
		err = l.Wait(short, "hourly", hourly)
		require.ErrorIs(t, err, pglock.ErrRateLimited)
		var limited *ratelimit.LimitedError
		require.ErrorAs(t, err, &limited)
		require.Greater(t, limited.RetryAfter, 59*time.Minute)
		retryAfter[i] = limited.RetryAfter
	}
	require.LessOrEqual(t, retryAfter[1], retryAfter[0], "the refused slot was not reserved")
}

func TestKeysExpireOnTheirOwn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `INSERT INTO pglock_rate_limits (durable, rate_key, tat)
		SELECT true, 'old-' || n, clock_timestamp() - interval '1 minute' FROM generate_series(1, 100) n`)
	require.NoError(t, err)
	l, err := ratelimit.New(d.Pool, nil)
	require.NoError(t, err)
	limit := ratelimit.Limit{Rate: 1000000, Per: time.Second, Burst: 1000000}
	for i := 0; i < 1000; i++ { // about one call in a hundred cleans up: all but never none
		_, err := l.Allow(ctx, "busy", limit)
		require.NoError(t, err)
	}
	var left int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_rate_limits WHERE rate_key LIKE 'old-%'`).Scan(&left))
	require.Zero(t, left, "keys whose limit has recovered are deleted")
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l, err := ratelimit.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		key   string
		limit ratelimit.Limit
	}{
		{"rate 0", "k", ratelimit.Limit{Rate: 0, Per: time.Second, Burst: 1}},
		{"negative rate", "k", ratelimit.Limit{Rate: -1, Per: time.Second, Burst: 1}},
		{"burst 0", "k", ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 0}},
		{"period 0", "k", ratelimit.Limit{Rate: 1, Burst: 1}},
		{"events closer than a microsecond", "k", ratelimit.Limit{Rate: 2000, Per: time.Millisecond, Burst: 1}},
		{"empty key", "", hourly},
		{"key over 255 bytes", strings.Repeat("k", 256), hourly},
		{"key with NUL", "k\x00", hourly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Allow(ctx, tc.key, tc.limit)
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			require.ErrorIs(t, l.Wait(ctx, tc.key, tc.limit), pglock.ErrInvalidArgument)
		})
	}
	_, err = ratelimit.New(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_rate_limits`).Scan(&rows))
	require.Zero(t, rows)
}

// The grant docs/sql.md lists is all a Limiter needs.
func TestLimiterWorksWithTheLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	role := d.NewRole(t, "pglock_app")
	_, err := d.Pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s;
		GRANT EXECUTE ON FUNCTION pglock_rate_take(boolean, varchar, bigint, integer, integer, bigint),
			pglock_rate_take_many(boolean, varchar[], bigint[], integer[], integer[], bigint),
			pglock_rate_refund(boolean, varchar, bigint, integer, integer), pglock_rate_peek(boolean, varchar, bigint, integer),
			pglock_rate_reset(boolean, varchar) TO %[1]s`, role))
	require.NoError(t, err)
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET ROLE "+role)
			return err
		}
	})
	for _, unlogged := range []bool{false, true} {
		l, err := ratelimit.New(pool, &ratelimit.Config{Unlogged: unlogged})
		require.NoError(t, err)
		res, err := l.Allow(ctx, "k", hourly)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		res, err = l.AllowAll(ctx, ratelimit.Cost{Key: "k", Limit: hourly, N: 2}, ratelimit.Cost{Key: "j", Limit: hourly, N: 2})
		require.NoError(t, err)
		require.True(t, res.Allowed)
		_, err = l.Refund(ctx, ratelimit.Cost{Key: "k", Limit: hourly, N: 2}, 1)
		require.NoError(t, err)
		_, err = l.Peek(ctx, "k", hourly)
		require.NoError(t, err)
		require.NoError(t, l.Reset(ctx, "k"))
	}
}

// 4 instances hammer one key for 5 s at R = 50/s, B = 10: the allowed count is never more than
// the burst plus 50 a second, and close to it (a loaded machine can leave the key without a
// caller for a moment, which only lowers the count); and a denied call's RetryAfter, honoured,
// lets it through.
func TestHammeredKeyAllowsTheRateAndTheBurst(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	limit := ratelimit.Limit{Rate: 50, Per: time.Second, Burst: 10}
	const run = 5 * time.Second
	var allowed atomic.Int64
	var honoured atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		l, err := ratelimit.New(d.NewPool(t, nil), nil)
		require.NoError(t, err)
		for range 2 {
			wg.Go(func() {
				ctx := context.Background()
				for time.Since(start) < run {
					res, err := l.Allow(ctx, "hammered", limit)
					assert.NoError(t, err)
					if res.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start) // the last calls began before run was over
	want := 10 + 50*elapsed.Seconds()
	got := float64(allowed.Load())
	t.Logf("allowed %v in %s; expected %.0f", got, elapsed.Round(time.Millisecond), want)
	require.LessOrEqual(t, got, want+1, "never more than the rate and the burst allow")
	// With callers always waiting, most of what the limit allows is taken; a busy machine's
	// stalls lose the slots that open while no caller is in flight, so the floor is loose.
	require.GreaterOrEqual(t, got, 0.5*want, "close to what they allow, with callers always waiting")

	// Spend what is left now, then honour the wait a denial gives.
	l, err := ratelimit.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	for {
		res, err := l.Allow(ctx, "honoured", limit)
		require.NoError(t, err)
		if !res.Allowed {
			time.Sleep(res.RetryAfter)
			res, err = l.Allow(ctx, "honoured", limit)
			require.NoError(t, err)
			require.True(t, res.Allowed, "a denied call's wait, honoured, then succeeds")
			honoured.Add(1)
			break
		}
	}
	require.Equal(t, int64(1), honoured.Load())
}
