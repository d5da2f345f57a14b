package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/testdb"
)

func TestBackoffDoublesUpToItsCapWithJitter(t *testing.T) {
	t.Parallel()
	b := backoff.Capped{First: 10 * time.Millisecond, Max: time.Second}
	for n, want := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond,
		4: 80 * time.Millisecond, 8: time.Second, 1000: time.Second, 1 << 40: time.Second} {
		for range 100 {
			d := b.Delay(n)
			require.GreaterOrEqual(t, d, want/2, "retry %d", n)
			require.LessOrEqual(t, d, want, "retry %d", n)
		}
	}
}

func TestBackoffFromALongFirstWaitNeverOverflows(t *testing.T) {
	t.Parallel()
	b := backoff.Capped{First: 10 * time.Second, Max: time.Hour}
	for _, n := range []int{1, 10, 31, 64, 1 << 30} {
		require.Positive(t, b.Delay(n), "retry %d", n)
		require.LessOrEqual(t, b.Delay(n), time.Hour, "retry %d", n)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Unix(0, 0))
	b := backoff.Capped{First: time.Second, Max: time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	slept := make(chan bool)
	go func() { slept <- b.Sleep(ctx, c, 1) }()
	require.NoError(t, c.WaitForTimers(testdb.Context(t), 1))
	cancel()
	require.False(t, <-slept)
	go func() { slept <- b.Sleep(context.Background(), c, 1) }()
	require.NoError(t, c.WaitForTimers(testdb.Context(t), 1))
	c.Advance(time.Second)
	require.True(t, <-slept)
}
