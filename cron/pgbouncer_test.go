package cron_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/testdb"
)

// Through PgBouncer in transaction pooling (exec mode, notifications off: docs/pgbouncer.md),
// two instances run each tick of an @every 1s schedule once, and miss none.
func TestThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	url := d.ThroughPgBouncer(t, "default_query_exec_mode=exec")
	l := newLedger()
	for range 2 {
		start(t, testdb.OpenPool(t, url, nil), &cron.Config{DisableNotifications: true}, func(s *cron.Scheduler) {
			require.NoError(t, s.Add("every-second", "@every 1s", nil, l.fn))
		})
	}
	first := l.next(t, "every-second")
	testdb.WaitFor(t, func() bool { return len(l.of("every-second")) >= 6 }, "six ticks run")
	byTick := map[time.Time]int{}
	last := first.ScheduledTime
	for _, r := range l.of("every-second") {
		byTick[r.ScheduledTime]++
		if r.ScheduledTime.After(last) {
			last = r.ScheduledTime
		}
	}
	for tick := first.ScheduledTime; !tick.After(last); tick = tick.Add(time.Second) {
		require.Equal(t, 1, byTick[tick], "tick %s ran %d times (none missed, none twice)", tick, byTick[tick])
	}
}
