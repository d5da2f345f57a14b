package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/lease"
)

func TestBadTimingIsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                   string
		ttl, heartbeat, margin time.Duration
		want                   error
	}{
		{"a TTL under the least", 50 * time.Millisecond, 0, 0, pglock.ErrInvalidTTL},
		{"a TTL over the most", 25 * time.Hour, 0, 0, pglock.ErrInvalidTTL},
		{"a margin that leaves no room for a heartbeat", time.Second, 0, 700 * time.Millisecond, pglock.ErrInvalidTTL},
		{"a negative margin", time.Second, 0, -time.Hour, pglock.ErrInvalidArgument},
		{"a heartbeat under a millisecond", time.Second, time.Nanosecond, 0, pglock.ErrInvalidArgument},
	} {
		_, err := lease.NewTiming(tt.ttl, tt.heartbeat, tt.margin)
		require.ErrorIs(t, err, tt.want, tt.name)
	}
}

func TestAConfigWithoutARequiredFieldIsRefused(t *testing.T) {
	t.Parallel()
	timing, err := lease.NewTiming(time.Second, 0, 0)
	require.NoError(t, err)
	whole := lease.Config{
		Name: "report", Timing: timing, Start: time.Now(), Ctx: context.Background(),
		Renew: func(context.Context, time.Duration) (time.Time, bool, error) { return time.Now(), true, nil },
	}
	for _, tt := range []struct {
		field string
		take  func(*lease.Config)
	}{
		{"Name", func(c *lease.Config) { c.Name = "" }},
		{"Renew", func(c *lease.Config) { c.Renew = nil }},
		{"Timing", func(c *lease.Config) { c.Timing = lease.Timing{} }},
		{"Start", func(c *lease.Config) { c.Start = time.Time{} }},
		{"Ctx", func(c *lease.Config) { c.Ctx = nil }},
	} {
		cfg := whole
		tt.take(&cfg)
		_, err := lease.New(cfg)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, tt.field)
		require.ErrorContains(t, err, tt.field)
	}
	for _, bad := range []lease.Timing{
		{TTL: time.Second},                                                // no margin: lost only at the store's expiry
		{TTL: 25 * time.Hour, Margin: time.Hour},                          // over MaxTTL
		{TTL: time.Second, Margin: 100 * time.Millisecond, Heartbeat: -1}, // a negative heartbeat
	} {
		cfg := whole
		cfg.Timing = bad
		_, err := lease.New(cfg)
		require.Error(t, err, "%+v", bad)
	}
	keeper, err := lease.New(whole)
	require.NoError(t, err)
	require.ErrorIs(t, keeper.Renew(context.Background(), &lease.Timing{}), pglock.ErrInvalidTTL)
	require.True(t, keeper.Stop())
}

// A zero Backoff waits DefaultFirstBackoff, never nothing: a retry loop on it does not spin.
func TestAZeroBackoffWaits(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 5; n++ {
		d := lease.Backoff{}.Delay(n)
		require.GreaterOrEqual(t, d, lease.DefaultFirstBackoff/2)
		require.LessOrEqual(t, d, lease.DefaultFirstBackoff)
	}
	capped := lease.Backoff{First: time.Second, Max: time.Millisecond}.Delay(3) // Max under First: First
	require.GreaterOrEqual(t, capped, time.Second/2)
	require.LessOrEqual(t, capped, time.Second)
}
