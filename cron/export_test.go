package cron

import (
	"time"

	"github.com/pglock/pglock/internal/clock"
)

// SetClock gives a test's Scheduler another host clock (before Start).
func SetClock(s *Scheduler, c clock.Clock) { s.clock = c }

// SetSeenEvery makes a test's Scheduler record that it has its schedules every d (before Start).
func SetSeenEvery(s *Scheduler, d time.Duration) { s.seenEvery = d }

// JitterOf is the offset of a tick of the named schedule within [0, jitter).
var JitterOf = jitterOf
