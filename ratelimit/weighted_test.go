package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/ratelimit"
)

func newLimiter(t *testing.T, d *testdb.DB) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(d.NewPool(t, nil), nil)
	require.NoError(t, err)
	return l
}

func TestAWeightedEventTakesItsCostAndARefundGivesItBack(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLimiter(t, d)
	ctx := context.Background()
	tokens := ratelimit.Limit{Rate: 100, Per: time.Hour, Burst: 100} // 100 tokens an hour

	res, err := l.AllowN(ctx, "llm:tenant-1", tokens, 70)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	require.Equal(t, 30, res.Remaining)
	res, err = l.AllowN(ctx, "llm:tenant-1", tokens, 40)
	require.NoError(t, err)
	require.False(t, res.Allowed, "40 do not fit in 30")
	require.Greater(t, res.RetryAfter, 5*time.Minute) // 10 more tokens: 6 minutes
	require.LessOrEqual(t, res.RetryAfter, 6*time.Minute)
	peek, err := l.Peek(ctx, "llm:tenant-1", tokens)
	require.NoError(t, err)
	require.Equal(t, 30, peek.Remaining, "a refusal takes nothing, and neither does Peek")
	require.True(t, peek.Allowed)

	// The answer used 25 tokens of the 70 taken: 45 go back.
	remaining, err := l.Refund(ctx, ratelimit.Cost{Key: "llm:tenant-1", Limit: tokens, N: 70}, 45)
	require.NoError(t, err)
	require.Equal(t, 75, remaining)
	// A refund never leaves a key more than its burst.
	_, err = l.Refund(ctx, ratelimit.Cost{Key: "llm:tenant-1", Limit: tokens, N: 70}, 70)
	require.NoError(t, err)
	peek, err = l.Peek(ctx, "llm:tenant-1", tokens)
	require.NoError(t, err)
	require.Equal(t, 100, peek.Remaining)

	res, err = l.AllowN(ctx, "llm:tenant-1", tokens, 100)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	peek, err = l.Peek(ctx, "llm:tenant-1", tokens)
	require.NoError(t, err)
	require.False(t, peek.Allowed)
	require.Greater(t, peek.RetryAfter, 35*time.Second, "one token: 36 s")
	require.NoError(t, l.Reset(ctx, "llm:tenant-1"))
	peek, err = l.Peek(ctx, "llm:tenant-1", tokens)
	require.NoError(t, err)
	require.Equal(t, 100, peek.Remaining, "reset: as a new key")
}

func TestCombinedLimitsAreDecidedAllOrNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLimiter(t, d)
	ctx := context.Background()
	perTenant := ratelimit.Limit{Rate: 10, Per: time.Hour, Burst: 10}
	global := ratelimit.Limit{Rate: 15, Per: time.Hour, Burst: 15}
	take := func(tenant string, n int) ratelimit.Result {
		res, err := l.AllowAll(ctx, ratelimit.Cost{Key: "api:" + tenant, Limit: perTenant, N: n}, ratelimit.Cost{Key: "api", Limit: global, N: n})
		require.NoError(t, err)
		return res
	}
	require.True(t, take("a", 8).Allowed)
	res := take("b", 8)
	require.False(t, res.Allowed, "b's own limit has room; the global one has 7")
	require.Greater(t, res.RetryAfter, 3*time.Minute)
	peek, err := l.Peek(ctx, "api:b", perTenant)
	require.NoError(t, err)
	require.Equal(t, 10, peek.Remaining, "b's limit took nothing from the refused decision")
	res = take("b", 7)
	require.True(t, res.Allowed)
	require.Equal(t, 0, res.Remaining, "the smallest remainder: the global limit's")
	require.False(t, take("a", 1).Allowed)
}

// Decisions sharing keys, named in any order, from four instances: the rows are locked in key
// order, so none deadlocks; the global budget is never exceeded, and it is used up.
func TestCombinedDecisionsAcrossInstancesNeverDeadlockNorExceedAnyLimit(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	limiters := make([]*ratelimit.Limiter, 4)
	for i := range limiters {
		limiters[i] = newLimiter(t, d)
	}
	perTenant := ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 40}
	global := ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 100}
	tenants := []string{"t1", "t2", "t3", "t4"}
	var (
		mu    sync.Mutex
		taken = map[string]int{}
		errs  []error
		wg    sync.WaitGroup
	)
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 60 {
				tenant := tenants[rng.IntN(len(tenants))]
				n := 1 + rng.IntN(3)
				costs := []ratelimit.Cost{{Key: "api:" + tenant, Limit: perTenant, N: n}, {Key: "api", Limit: global, N: n}}
				if rng.IntN(2) == 0 {
					costs[0], costs[1] = costs[1], costs[0]
				}
				res, err := limiters[g%4].AllowAll(context.Background(), costs...)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if res.Allowed {
					taken[tenant] += n
					taken["all"] += n
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		var pgErr *pgconn.PgError
		require.False(t, errors.As(err, &pgErr) && pgErr.Code == "40P01", "deadlock: %v", err)
	}
	require.Empty(t, errs)
	t.Logf("taken: %v", taken)
	for _, tenant := range tenants {
		require.LessOrEqual(t, taken[tenant], perTenant.Burst, tenant)
	}
	require.LessOrEqual(t, taken["all"], global.Burst)
	// 960 decisions of 1 to 3 wanted far more than 100: the last 2 may not fit any cost left.
	require.GreaterOrEqual(t, taken["all"], global.Burst-2, "what was admissible was admitted")
}

// Under a rate (not only a burst), 4 instances hammering one combined decision: the cost
// admitted over the run never exceeds what the limits allow in that time (burst plus rate), and
// falls short of it by little.
func TestHammeredCombinedLimitAdmitsItsRateAcrossInstances(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	limiters := make([]*ratelimit.Limiter, 4)
	for i := range limiters {
		limiters[i] = newLimiter(t, d)
	}
	for _, l := range limiters {
		_, err := l.Peek(context.Background(), "warm-up", ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}) // the pool's first connection
		require.NoError(t, err)
	}
	perKey := ratelimit.Limit{Rate: 40, Per: time.Second, Burst: 10}
	perDay := ratelimit.Limit{Rate: 1000, Per: 24 * time.Hour, Burst: 1000}
	var (
		admitted       atomic.Int64
		firstOnce      sync.Once
		first, lastEnd atomic.Int64 // UnixNano: the first decision's start, the last one's end
		wg             sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(2 * time.Second)
	for g := range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				firstOnce.Do(func() { first.Store(time.Now().UnixNano()) })
				res, err := limiters[g%4].AllowAll(context.Background(),
					ratelimit.Cost{Key: "key:per-second", Limit: perKey, N: 2}, ratelimit.Cost{Key: "key:per-day", Limit: perDay, N: 2})
				if err != nil {
					t.Errorf("AllowAll: %v", err)
					return
				}
				if res.Allowed {
					admitted.Add(2)
				}
				for end := time.Now().UnixNano(); ; {
					if last := lastEnd.Load(); last >= end || lastEnd.CompareAndSwap(last, end) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	// At most the burst, and 40 a second from the first decision to the last.
	span := time.Duration(lastEnd.Load() - first.Load())
	ceiling := int64(perKey.Burst) + int64(span.Seconds()*float64(perKey.Rate))
	t.Logf("admitted %d over %s of decisions; the limit allows at most %d", admitted.Load(), span.Round(time.Millisecond), ceiling)
	require.LessOrEqual(t, admitted.Load(), ceiling)
	// Nothing admissible refused: short of the ceiling by at most what the last 100 ms allow
	// (the run's last decisions, and its first one's round trip), and an odd event (costs are 2).
	require.GreaterOrEqual(t, admitted.Load(), ceiling-int64(0.1*float64(perKey.Rate))-1)
	peek, err := limiters[0].Peek(context.Background(), "key:per-day", perDay)
	require.NoError(t, err)
	require.Equal(t, int64(perDay.Burst)-admitted.Load(), int64(peek.Remaining), "the day's budget counts the same")
}

func TestWaitAllReservesEveryLimitForTheSameMoment(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLimiter(t, d)
	ctx := context.Background()
	fast := ratelimit.Limit{Rate: 1, Per: time.Second, Burst: 1}     // one a second
	slow := ratelimit.Limit{Rate: 2, Per: 5 * time.Second, Burst: 1} // one every 2.5 s
	costs := []ratelimit.Cost{{Key: "fast", Limit: fast}, {Key: "slow", Limit: slow}}
	res, err := l.AllowAll(ctx, costs...)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	var limited *ratelimit.LimitedError
	require.ErrorAs(t, l.WaitAll(short, costs...), &limited, "the slow limit's slot is 2.5 s away")
	require.Greater(t, limited.RetryAfter, time.Second)
	require.Equal(t, "fast+slow", limited.Key)
	require.NoError(t, l.WaitAll(ctx, costs...))
	// Both were reserved for the slow limit's slot, T: the fast key's time is T + 1 s, the slow
	// key's T + 2.5 s.
	var apart time.Duration
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (s.tat - f.tat) FROM pglock_rate_limits s, pglock_rate_limits f
		WHERE s.rate_key = 'slow' AND f.rate_key = 'fast'`).Scan(&apart))
	require.Equal(t, 1500*time.Millisecond, apart)
}

func TestWeightedAndCombinedBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLimiter(t, d)
	ctx := context.Background()
	limit := ratelimit.Limit{Rate: 10, Per: time.Hour, Burst: 10}
	for _, tc := range []struct {
		name  string
		costs []ratelimit.Cost
	}{
		{"no limits", nil},
		{"a negative cost", []ratelimit.Cost{{Key: "k", Limit: limit, N: -1}}},
		{"a cost above the burst", []ratelimit.Cost{{Key: "k", Limit: limit, N: 11}}},
		{"a key twice", []ratelimit.Cost{{Key: "k", Limit: limit}, {Key: "k", Limit: limit}}},
		{"a bad key among good ones", []ratelimit.Cost{{Key: "k", Limit: limit}, {Key: "", Limit: limit}}},
		{"a bad limit among good ones", []ratelimit.Cost{{Key: "k", Limit: limit}, {Key: "j", Limit: ratelimit.Limit{Rate: 1, Per: time.Second}}}},
		{"over MaxCosts limits", manyCosts(ratelimit.MaxCosts+1, limit)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.AllowAll(ctx, tc.costs...)
			require.ErrorIs(t, err, pglock.ErrInvalidArgument)
			require.ErrorIs(t, l.WaitAll(ctx, tc.costs...), pglock.ErrInvalidArgument)
		})
	}
	_, err := l.AllowN(ctx, "k", limit, 0)
	require.NoError(t, err, "a cost of 0 is the default, 1")
	for _, n := range []int{0, -1, 2} {
		_, err := l.Refund(ctx, ratelimit.Cost{Key: "k", Limit: limit, N: 1}, n)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, "a refund of %d of 1 taken", n)
	}
	_, err = l.Peek(ctx, "", limit)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	require.ErrorIs(t, l.Reset(ctx, strings.Repeat("k", 256)), pglock.ErrInvalidArgument)
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_rate_limits WHERE rate_key <> 'k'`).Scan(&rows))
	require.Zero(t, rows, "bad input writes nothing")
	peek, err := l.Peek(ctx, "k", limit)
	require.NoError(t, err)
	require.Equal(t, 9, peek.Remaining, "only the good AllowN took one")

	t.Run("the SQL contract", func(t *testing.T) {
		for _, tc := range []struct{ name, args, column string }{
			{"arrays of different lengths", `true, ARRAY['a','b'], ARRAY[1]::bigint[], ARRAY[1,1], ARRAY[1,1], 0`, "p_interval_us"},
			{"no keys", `true, ARRAY[]::varchar[], ARRAY[]::bigint[], ARRAY[]::int[], ARRAY[]::int[], 0`, "p_keys"},
			{"a key twice", `true, ARRAY['a','a'], ARRAY[1,1]::bigint[], ARRAY[1,1], ARRAY[1,1], 0`, "p_keys"},
			{"a cost above its burst", `true, ARRAY['a','b'], ARRAY[1,1]::bigint[], ARRAY[1,1], ARRAY[1,2], 0`, "p_costs"},
			{"a cost of 0", `true, ARRAY['a'], ARRAY[1]::bigint[], ARRAY[1], ARRAY[0], 0`, "p_costs"},
			{"a NULL burst", `true, ARRAY['a','b'], ARRAY[1,1]::bigint[], ARRAY[1,NULL], ARRAY[1,1], 0`, "p_bursts"},
			{"a burst of 0", `true, ARRAY['a'], ARRAY[1]::bigint[], ARRAY[0], ARRAY[1], 0`, "p_bursts"},
			{"a NULL interval", `true, ARRAY['a'], ARRAY[NULL]::bigint[], ARRAY[1], ARRAY[1], 0`, "p_interval_us"},
			{"a NULL cost", `true, ARRAY['a'], ARRAY[1]::bigint[], ARRAY[1], ARRAY[NULL]::int[], 0`, "p_costs"},
			{"an empty key", `true, ARRAY['a',''], ARRAY[1,1]::bigint[], ARRAY[1,1], ARRAY[1,1], 0`, "p_keys"},
			{"a NULL key", `true, ARRAY['a',NULL], ARRAY[1,1]::bigint[], ARRAY[1,1], ARRAY[1,1], 0`, "p_keys"},
			{"a negative wait", `true, ARRAY['a'], ARRAY[1]::bigint[], ARRAY[1], ARRAY[1], -1`, "p_max_wait_us"},
		} {
			_, err := d.Pool.Exec(ctx, fmt.Sprintf(`SELECT pglock_rate_take_many(%s)`, tc.args))
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, tc.name)
			require.Equal(t, "22023", pgErr.Code, tc.name)
			require.Equal(t, tc.column, pgErr.ColumnName, tc.name)
		}
		var rows int
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pglock_rate_limits WHERE rate_key IN ('a', 'b')`).Scan(&rows))
		require.Zero(t, rows, "bad arguments write nothing")
	})
}

func manyCosts(n int, limit ratelimit.Limit) []ratelimit.Cost {
	costs := make([]ratelimit.Cost, n)
	for i := range costs {
		costs[i] = ratelimit.Cost{Key: fmt.Sprintf("k%d", i), Limit: limit}
	}
	return costs
}
