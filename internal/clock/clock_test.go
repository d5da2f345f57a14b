package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"

	"github.com/pglock/pglock/internal/clock"
)

func TestFakeFiresTimersWhenAdvancedPastThem(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC)
	c := clock.NewFake(start)
	fired := make(chan string, 3)
	c.AfterFunc(2*time.Second, func() { fired <- "2s" })
	stopped := c.AfterFunc(time.Second, func() { fired <- "stopped" })
	c.AfterFunc(time.Minute, func() { fired <- "1m" })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "a stopped timer is no longer pending")

	c.Advance(1999 * time.Millisecond)
	n, next := c.Pending()
	require.Equal(t, []any{2, time.Millisecond}, []any{n, next}, "nothing is due before its time")
	c.Advance(time.Millisecond)
	require.Equal(t, "2s", <-fired)
	require.Equal(t, start.Add(2*time.Second), c.Now())
	n, next = c.Pending()
	require.Equal(t, []any{1, 58 * time.Second}, []any{n, next})
}

func TestFakeResetMovesATimer(t *testing.T) {
	t.Parallel()
	c := clock.NewFake(time.Unix(0, 0))
	fired := make(chan struct{}, 1)
	timer := c.AfterFunc(time.Second, func() { fired <- struct{}{} })
	require.True(t, timer.Reset(3*time.Second))
	require.NoError(t, c.WaitForTimers(testdb.Context(t), 1))
	c.Advance(2 * time.Second)
	n, next := c.Pending()
	require.Equal(t, []any{1, time.Second}, []any{n, next})
	c.Advance(time.Second)
	<-fired
	require.False(t, timer.Reset(0), "it had fired")
	<-fired // a reset to now runs at once
}
