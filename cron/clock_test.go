package cron_test

import (
	"time"

	"github.com/pglock/pglock/internal/clock"
)

// skewedClock is the host's clock, off by a fixed amount: its timers run in real time.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

func (skewedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}
