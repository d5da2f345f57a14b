package cron

import "time"

// tick is one entry of a claim: a tick to run now ("scheduled"), a missed tick to run in turn
// ("catch_up"), or a range of missed ticks to record ("missed": from at to missedUntil,
// missedCount of them, -1 for more than maxCount).
type tick struct {
	at          time.Time
	kind        string
	missedUntil time.Time
	missedCount int64
}

// maxCount is how many missed ticks a plan counts before it records "too many to count".
const maxCount = 10000

// plan is what an instance claims for a schedule whose ticks up to watermark are accounted
// for, at database time now: its ticks in (watermark, now] that have fired (fire gives a tick's
// time with its jitter; nil for none), as the catch-up policy says, and the new watermark (the
// latest tick). No ticks: none is due.
//
// The latest tick runs as scheduled if it is at most OnTimeLimit late. Ticks before it were
// missed (no instance claimed them in time). CatchUpSkip records them missed; CatchUpLatest
// runs the latest one within the window when the latest tick is not on time; CatchUpAll runs
// each within the window (at most MaxCatchUp, the newest). What does not run is recorded as
// one missed range.
func plan(s schedule, set settings, watermark, now time.Time, fire func(time.Time) time.Time) (ticks []tick, until time.Time) {
	if fire == nil {
		fire = func(at time.Time) time.Time { return at }
	}
	first := s.next(watermark)
	if first.IsZero() || first.After(now) {
		return nil, watermark
	}
	// With a jitter shorter than the gap between ticks, only the latest tick can be due and
	// not yet fired: it waits, and the ticks before it are planned.
	upTo := now
	if latest := lastTicks(s, watermark, now, 1); fire(latest[0]).After(now) {
		if upTo = latest[0].Add(-time.Nanosecond); first.After(upTo) {
			return nil, watermark
		}
	}
	keep := 1
	if set.catchUp == CatchUpAll {
		keep = MaxCatchUp
	}
	recent := lastTicks(s, watermark, upTo, keep+1)
	latest := recent[len(recent)-1]
	candidates := recent[max(0, len(recent)-keep):]
	firstKept := -1 // index in recent
	for i, at := range candidates {
		kind := "catch_up"
		switch isLatest := i == len(candidates)-1; {
		case isLatest && now.Sub(fire(at)) <= OnTimeLimit:
			kind = "scheduled"
		case set.catchUp == CatchUpSkip, now.Sub(at) > set.window:
			continue
		case set.catchUp == CatchUpLatest && !isLatest:
			continue
		}
		if firstKept < 0 {
			firstKept = len(recent) - len(candidates) + i
		}
		ticks = append(ticks, tick{at: at, kind: kind})
	}
	missedUntil := latest
	switch {
	case firstKept == 0:
		return ticks, latest // recent starts at first: nothing was missed
	case firstKept > 0:
		missedUntil = recent[firstKept-1]
	}
	missed := tick{at: first, kind: "missed", missedUntil: missedUntil, missedCount: countTicks(s, first, missedUntil)}
	return append([]tick{missed}, ticks...), latest
}

// lastTicks returns the newest n ticks in (after, upTo], oldest first, looking back from upTo
// over spans that grow fourfold, so that a long outage is not walked tick by tick.
func lastTicks(s schedule, after, upTo time.Time, n int) []time.Time {
	for span := time.Minute; ; span *= 4 {
		from := upTo.Add(-span)
		if !from.After(after) {
			from = after
		}
		var found []time.Time
		for at := s.next(from); !at.IsZero() && !at.After(upTo); at = s.next(at) {
			if found = append(found, at); len(found) > n {
				found = found[1:]
			}
		}
		if len(found) == n || from.Equal(after) {
			return found
		}
	}
}

// countTicks counts the ticks from first to last, both included; -1 past maxCount.
func countTicks(s schedule, first, last time.Time) int64 {
	var n int64
	for at := first; !at.IsZero() && !at.After(last); at = s.next(at) {
		if n++; n > maxCount {
			return -1
		}
	}
	return n
}
