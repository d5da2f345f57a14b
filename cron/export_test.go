package cron

import "github.com/pglock/pglock/internal/clock"

// SetClock gives a test's Scheduler another host clock (before Start).
func SetClock(s *Scheduler, c clock.Clock) { s.clock = c }
