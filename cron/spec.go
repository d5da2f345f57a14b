package cron

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
)

// schedule is a parsed spec: every instance that parses the same spec in the same location
// computes the same ticks.
type schedule interface {
	// next returns the first tick strictly after t, or the zero time if there is none within
	// five years.
	next(t time.Time) time.Time
}

var parser = robfig.NewParser(robfig.SecondOptional | robfig.Minute | robfig.Hour | robfig.Dom |
	robfig.Month | robfig.Dow | robfig.Descriptor)

// maxSpecLen is the longest spec, in bytes, that pglock_cron_schedules keeps.
const maxSpecLen = 1024

// parseSpec parses spec as robfig/cron's parser does (five fields or six with seconds first,
// descriptors, a CRON_TZ= or TZ= prefix), reading it in loc unless it names its own zone, with
// one extension: L in the day-of-month field, the month's last day (alone or in a list, such as
// 15,L; not with a day of the week). Errors match [pglock.ErrInvalidSpec] and say what is wrong.
// Leading and trailing spaces do not count.
func parseSpec(spec string, loc *time.Location) (sched schedule, zone string, err error) {
	invalid := func(format string, args ...any) error {
		return errs.Errorf("%w %.80q: %s", pglock.ErrInvalidSpec, spec, fmt.Sprintf(format, args...))
	}
	trimmed := strings.TrimSpace(spec)
	body := trimmed
	switch {
	case trimmed == "":
		return nil, "", invalid("empty")
	case len(trimmed) > maxSpecLen:
		return nil, "", invalid("%d bytes, the limit is %d", len(trimmed), maxSpecLen)
	}
	if strings.HasPrefix(trimmed, "CRON_TZ=") || strings.HasPrefix(trimmed, "TZ=") {
		// The parser slices the zone out up to the first space, and panics without one.
		prefix, rest, found := strings.Cut(trimmed, " ")
		if !found || strings.TrimSpace(rest) == "" {
			return nil, "", invalid("a %s prefix must be followed by a space and the schedule", prefix)
		}
		body = strings.TrimSpace(rest)
		name := prefix[strings.Index(prefix, "=")+1:]
		if name == "" || name == "Local" {
			return nil, "", invalid("name a time zone (Local differs from host to host)")
		}
		if loc, err = time.LoadLocation(name); err != nil {
			return nil, "", invalid("unknown time zone %q", name)
		}
	}
	if every, ok := strings.CutPrefix(body, "@every"); ok { // a duration: no zone applies
		d, err := time.ParseDuration(strings.TrimSpace(every))
		if err != nil {
			return nil, "", invalid("@every needs a duration, such as @every 10s")
		}
		if d < time.Second || d%time.Second != 0 {
			return nil, "", invalid("@every needs a whole number of seconds, at least 1s (got %s)", d)
		}
		return everySchedule(d), "UTC", nil
	}
	body, lastDay, listed, err := cutLastDay(body)
	if err != nil {
		return nil, "", invalid("%v", err)
	}
	spec6, err := parseFields(body)
	if err != nil {
		return nil, "", invalid("%v", err)
	}
	s := newSpecSchedule(spec6, loc)
	if lastDay {
		days := uint64(0)
		if listed != "" {
			withListed, err := parseFields(listed)
			if err != nil {
				return nil, "", invalid("%v", err)
			}
			days = withListed.Dom
		}
		s = lastDaySchedule{inner: s, loc: loc, days: days}
	}
	if s.next(time.Now()).IsZero() {
		return nil, "", invalid("it never fires (no matching time in the next five years)")
	}
	return s, loc.String(), nil
}

func parseFields(body string) (*robfig.SpecSchedule, error) {
	parsed, err := parseRecovering(body)
	if err != nil {
		return nil, err
	}
	spec6, ok := parsed.(*robfig.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unsupported schedule type %T", parsed)
	}
	return spec6, nil
}

func newSpecSchedule(spec6 *robfig.SpecSchedule, loc *time.Location) schedule {
	s := specSchedule{loc: loc, realTime: spec6.Hour&allHours == allHours}
	s.wall = *spec6
	s.wall.Location = time.UTC
	if s.realTime {
		s.wall.Location = loc
	}
	return s
}

// domCandidates stands for L in the day-of-month field given to robfig's parser: every last
// day of a month is one of them.
const domCandidates = "28-31"

// cutLastDay takes L out of the day-of-month field of body (fields only, no zone prefix): it
// returns body with that field replaced by the candidate days, whether L was there, and, when
// the field lists other days beside L, body with that field holding them alone ("" for none).
func cutLastDay(body string) (out string, lastDay bool, listed string, err error) {
	fields := strings.Fields(body)
	dom, dow := -1, -1
	switch len(fields) {
	case 5:
		dom, dow = 2, 4
	case 6:
		dom, dow = 3, 5
	}
	if dom < 0 || !strings.Contains(strings.ToUpper(fields[dom]), "L") {
		return body, false, "", nil
	}
	var others []string
	for _, part := range strings.Split(fields[dom], ",") {
		if strings.EqualFold(part, "L") {
			lastDay = true
		} else {
			others = append(others, part)
		}
	}
	if !lastDay {
		return "", false, "", fmt.Errorf("the day of the month takes L alone or in a list such as 15,L, not %q", fields[dom])
	}
	if d := fields[dow]; d != "*" && d != "?" {
		return "", false, "", fmt.Errorf("the last day of the month (L) cannot be combined with a day of the week (%q)", d)
	}
	if len(others) > 0 {
		fields[dom] = strings.Join(others, ",")
		listed = strings.Join(fields, " ")
		fields[dom] += "," + domCandidates
	} else {
		fields[dom] = domCandidates
	}
	return strings.Join(fields, " "), true, listed, nil
}

// lastDaySchedule is a spec with L in its day of the month: the ticks of inner (whose days are
// the candidates and the days listed) that fall on the last day of their month in loc, or on a
// day listed.
type lastDaySchedule struct {
	inner schedule
	loc   *time.Location
	days  uint64 // the days listed beside L, as robfig's bits
}

func (s lastDaySchedule) next(t time.Time) time.Time {
	for {
		n := s.inner.next(t)
		if n.IsZero() {
			return n
		}
		local := n.In(s.loc)
		if local.AddDate(0, 0, 1).Month() != local.Month() || s.days&(1<<uint(local.Day())) != 0 {
			return n
		}
		t = n
	}
}

// boundedSchedule is a schedule between start and end (either zero for none): a tick before
// start or after end is not a tick.
type boundedSchedule struct {
	inner      schedule
	start, end time.Time
}

func (s boundedSchedule) next(t time.Time) time.Time {
	if !s.start.IsZero() && t.Before(s.start) {
		t = s.start.Add(-time.Nanosecond)
	}
	n := s.inner.next(t)
	if !s.end.IsZero() && n.After(s.end) {
		return time.Time{}
	}
	return n
}

// jitterOf is the offset of a tick of the named schedule within [0, jitter), in whole
// milliseconds: from a hash of both, so that every instance computes the same.
func jitterOf(name string, tick time.Time, jitter time.Duration) time.Duration {
	ms := jitter.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(tick.UnixNano())))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// shortestGap is the shortest time between two of the next ticks of s after from (looking at
// up to gapSample of them); 0 if it has fewer than two.
func shortestGap(s schedule, from time.Time) time.Duration {
	var gap time.Duration
	prev := s.next(from)
	for i := 0; i < gapSample && !prev.IsZero(); i++ {
		n := s.next(prev)
		if n.IsZero() {
			break
		}
		if d := n.Sub(prev); gap == 0 || d < gap {
			gap = d
		}
		prev = n
	}
	return gap
}

// gapSample is how many ticks shortestGap looks at: more than a year of a daily schedule, so
// that a daylight-saving change is among them.
const gapSample = 400

func parseRecovering(spec string) (s robfig.Schedule, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	return parser.Parse(spec)
}

// everySchedule is @every d, aligned to the Unix epoch: every instance computes the same ticks,
// whenever it started.
type everySchedule time.Duration

func (e everySchedule) next(t time.Time) time.Time {
	d := time.Duration(e)
	since := t.Sub(time.Unix(0, 0)) // overflows only past the year 2262
	return time.Unix(0, 0).Add((since/d + 1) * d).UTC()
}

const allHours = 1<<24 - 1

// specSchedule is a field schedule. One that fires in every hour runs on real time, as
// robfig/cron computes it in its zone (through a daylight-saving change it keeps its rhythm).
// One with fixed hours runs on the wall clock, as ISC cron does: its ticks are found on a
// clock without daylight saving (wall, whose fields are read as UTC), then placed in the zone;
// a tick in a spring-forward gap runs at the transition, and a tick in a repeated fall-back
// hour runs once, at its first occurrence.
type specSchedule struct {
	wall     robfig.SpecSchedule
	loc      *time.Location
	realTime bool
}

func (s specSchedule) next(t time.Time) time.Time {
	if s.realTime {
		n := s.wall.Next(t)
		if n.IsZero() {
			return n
		}
		return n.UTC()
	}
	w := wallOf(t.In(s.loc))
	for {
		w = s.wall.Next(w)
		if w.IsZero() {
			return w
		}
		if at := placeWall(w, s.loc); at.After(t) {
			return at.UTC()
		}
		// A wall time already passed: the second occurrence of a repeated hour.
	}
}

// placeWall returns the instant of wall time w (fields read as UTC) in loc: the earlier of two
// in a repeated hour, the transition for one in a gap.
func placeWall(w time.Time, loc *time.Location) time.Time {
	at := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	start, end := at.ZoneBounds()
	if wallOf(at).Equal(w) {
		// time.Date may pick either occurrence of a repeated wall time: take the earlier.
		_, before := start.Add(-time.Nanosecond).Zone()
		if _, after := at.Zone(); !start.IsZero() && before > after {
			if earlier := at.Add(-time.Duration(before-after) * time.Second); wallOf(earlier).Equal(w) {
				return earlier
			}
		}
		return at
	}
	// w does not exist: it is in a gap, which ends at the transition next to at.
	if end.IsZero() || at.Sub(start) <= end.Sub(at) {
		return start
	}
	return end
}

// wallOf returns the wall time of at in its zone, its fields read as UTC.
func wallOf(at time.Time) time.Time {
	return time.Date(at.Year(), at.Month(), at.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.UTC)
}
