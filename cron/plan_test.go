package cron

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
)

func mustParse(t *testing.T, spec string, zone string) schedule {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	require.NoError(t, err)
	s, _, err := parseSpec(spec, loc)
	require.NoError(t, err)
	return s
}

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v.UTC()
}

// drive runs a scheduler's planning on a driven clock: from start to end in steps, claiming
// what each plan says, and returns the times that ran.
func drive(t *testing.T, s schedule, start, end time.Time, step time.Duration) []time.Time {
	t.Helper()
	set := settings{catchUp: CatchUpSkip, window: 24 * time.Hour}
	watermark := start
	var ran []time.Time
	for now := start; !now.After(end); now = now.Add(step) {
		ticks, until := plan(s, set, watermark, now, nil)
		for _, tk := range ticks {
			require.Equal(t, "scheduled", tk.kind, "a driven clock misses nothing: %v", tk)
			ran = append(ran, tk.at)
		}
		watermark = until
	}
	return ran
}

// A run in a spring-forward gap runs at the transition; a run in a repeated fall-back hour
// runs once, at its first occurrence; a schedule that fires every hour keeps real time.
func TestDaylightSavingTransitions2026(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, spec, zone, from, to string
		want                       []string
	}{
		{"LA spring forward: 02:30 runs at 03:00 PDT", "30 2 * * *", "America/Los_Angeles",
			"2026-03-07T12:00:00Z", "2026-03-09T12:00:00Z",
			[]string{"2026-03-08T10:00:00Z", "2026-03-09T09:30:00Z"}},
		{"LA spring forward: ticks in the gap run once, at the transition", "*/30 1-3 * * *", "America/Los_Angeles",
			"2026-03-08T08:00:00Z", "2026-03-08T12:00:00Z",
			[]string{"2026-03-08T09:00:00Z", "2026-03-08T09:30:00Z", "2026-03-08T10:00:00Z", "2026-03-08T10:30:00Z"}},
		{"LA fall back: 01:30 runs once", "30 1 * * *", "America/Los_Angeles",
			"2026-10-31T12:00:00Z", "2026-11-02T12:00:00Z",
			[]string{"2026-11-01T08:30:00Z", "2026-11-02T09:30:00Z"}},
		{"LA fall back: the repeated hour's ticks run once", "*/30 1-2 * * *", "America/Los_Angeles",
			"2026-11-01T07:00:00Z", "2026-11-01T12:00:00Z",
			[]string{"2026-11-01T08:00:00Z", "2026-11-01T08:30:00Z", "2026-11-01T10:00:00Z", "2026-11-01T10:30:00Z"}},
		{"Berlin spring forward: 02:30 runs at 03:00 CEST", "30 2 * * *", "Europe/Berlin",
			"2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"Berlin fall back: 02:30 runs once", "30 2 * * *", "Europe/Berlin",
			"2026-10-24T12:00:00Z", "2026-10-26T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"Berlin fall back: an hourly schedule keeps real time", "0 * * * *", "Europe/Berlin",
			"2026-10-24T23:30:00Z", "2026-10-25T02:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{"Berlin spring forward: an hourly schedule keeps real time", "0 * * * *", "Europe/Berlin",
			"2026-03-28T23:30:00Z", "2026-03-29T02:30:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"}},
		{"CRON_TZ prefix", "CRON_TZ=America/Los_Angeles 30 2 * * *", "UTC",
			"2026-03-07T12:00:00Z", "2026-03-08T12:00:00Z",
			[]string{"2026-03-08T10:00:00Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, c.spec, c.zone)
			ran := drive(t, s, at(t, c.from), at(t, c.to), 7*time.Second)
			want := make([]time.Time, len(c.want))
			for i, w := range c.want {
				want[i] = at(t, w)
			}
			require.Equal(t, want, ran)
		})
	}
}

// Every instance computes the same @every ticks, whatever time it started; a zone prefix
// changes nothing.
func TestEveryTicksAreAlignedToTheEpoch(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@every 7s", "UTC")
	require.Equal(t, s, mustParse(t, "CRON_TZ=Europe/Berlin @every 7s", "UTC"))
	a := s.next(at(t, "2026-11-24T10:00:01Z").Add(123 * time.Millisecond))
	b := s.next(at(t, "2026-11-24T10:00:03Z"))
	require.Equal(t, a, b)
	require.Zero(t, a.Unix()%7)
}

func TestPlanRecordsMissedTicksByCatchUpPolicy(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "0 * * * *", "UTC")
	watermark := at(t, "2026-11-24T00:00:00Z")
	late := at(t, "2026-11-24T05:10:00Z")   // 5 ticks since; the latest, 05:00, is 10 min late
	onTime := at(t, "2026-11-24T05:00:30Z") // the latest is on time
	for _, c := range []struct {
		name    string
		catchUp CatchUp
		window  time.Duration
		now     time.Time
		want    []tick
	}{
		{"skip records every missed tick", CatchUpSkip, 24 * time.Hour, late,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "missed", missedUntil: at(t, "2026-11-24T05:00:00Z"), missedCount: 5}}},
		{"skip runs the latest tick when on time", CatchUpSkip, 24 * time.Hour, onTime,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "missed", missedUntil: at(t, "2026-11-24T04:00:00Z"), missedCount: 4},
				{at: at(t, "2026-11-24T05:00:00Z"), kind: "scheduled"}}},
		{"latest runs the latest missed tick", CatchUpLatest, 24 * time.Hour, late,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "missed", missedUntil: at(t, "2026-11-24T04:00:00Z"), missedCount: 4},
				{at: at(t, "2026-11-24T05:00:00Z"), kind: "catch_up"}}},
		{"latest outside the window is missed", CatchUpLatest, 5 * time.Minute, late,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "missed", missedUntil: at(t, "2026-11-24T05:00:00Z"), missedCount: 5}}},
		{"all runs each tick in the window, oldest first", CatchUpAll, 150 * time.Minute, late,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "missed", missedUntil: at(t, "2026-11-24T02:00:00Z"), missedCount: 2},
				{at: at(t, "2026-11-24T03:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T04:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T05:00:00Z"), kind: "catch_up"}}},
		{"all with the latest on time", CatchUpAll, 24 * time.Hour, onTime,
			[]tick{{at: at(t, "2026-11-24T01:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T02:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T03:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T04:00:00Z"), kind: "catch_up"},
				{at: at(t, "2026-11-24T05:00:00Z"), kind: "scheduled"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ticks, until := plan(s, settings{catchUp: c.catchUp, window: c.window}, watermark, c.now, nil)
			require.Equal(t, c.want, ticks)
			require.Equal(t, at(t, "2026-11-24T05:00:00Z"), until)
		})
	}
}

// A week-long outage of a schedule that fires every second is planned without walking it.
func TestPlanCountsNoMoreThanItMust(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@every 1s", "UTC")
	now := at(t, "2026-11-24T00:00:00Z")
	ticks, until := plan(s, settings{catchUp: CatchUpSkip, window: time.Hour}, now.Add(-7*24*time.Hour), now, nil)
	require.Equal(t, now, until)
	require.Equal(t, []tick{
		{at: now.Add(-7*24*time.Hour + time.Second), kind: "missed", missedUntil: now.Add(-time.Second), missedCount: -1},
		{at: now, kind: "scheduled"},
	}, ticks)
}

// L in the day of the month is the month's last day: 28, 29, 30 or 31, leap years included,
// through daylight-saving changes that fall on it (a gap runs at the transition, a repeated
// hour once), alone or beside listed days.
func TestLastDayOfTheMonth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, spec, zone, from string
		want                   []string
	}{
		{"the last day of each month", "0 0 12 L * *", "UTC", "2027-01-15T00:00:00Z",
			[]string{"2027-01-31T12:00:00Z", "2027-02-28T12:00:00Z", "2027-03-31T12:00:00Z", "2027-04-30T12:00:00Z"}},
		{"a leap year's February", "0 12 L 2 *", "UTC", "2027-03-01T00:00:00Z",
			[]string{"2028-02-29T12:00:00Z", "2029-02-28T12:00:00Z"}},
		{"2100 is not a leap year", "0 12 L 2 *", "UTC", "2099-03-01T00:00:00Z",
			[]string{"2100-02-28T12:00:00Z", "2101-02-28T12:00:00Z"}},
		{"beside listed days", "0 0 9 15,L * *", "UTC", "2027-02-01T00:00:00Z",
			[]string{"2027-02-15T09:00:00Z", "2027-02-28T09:00:00Z", "2027-03-15T09:00:00Z", "2027-03-31T09:00:00Z"}},
		{"beside listed days, the minutes naming the same range", "28-31 9 15,L * *", "UTC", "2027-02-27T00:00:00Z",
			[]string{"2027-02-28T09:28:00Z", "2027-02-28T09:29:00Z", "2027-02-28T09:30:00Z", "2027-02-28T09:31:00Z", "2027-03-15T09:28:00Z"}},
		{"spring forward on the last day: 02:30 runs at the transition", "30 2 L * *", "Europe/Berlin", "2024-03-30T00:00:00Z",
			[]string{"2024-03-31T01:00:00Z", "2024-04-30T00:30:00Z"}},
		{"fall back on the last day: 02:30 runs once", "30 2 L * *", "Europe/Berlin", "2027-10-30T00:00:00Z",
			[]string{"2027-10-31T00:30:00Z", "2027-11-30T01:30:00Z"}},
		{"hourly on the last day in New York keeps real time", "0 * L * *", "America/New_York", "2026-01-31T04:00:00Z",
			[]string{"2026-01-31T05:00:00Z", "2026-01-31T06:00:00Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, c.spec, c.zone)
			var got []string
			for next := at(t, c.from); len(got) < len(c.want); {
				next = s.next(next)
				require.False(t, next.IsZero())
				got = append(got, next.Format(time.RFC3339))
			}
			require.Equal(t, c.want, got)
		})
	}
	for _, bad := range []string{"0 0 L * MON", "0 0 L-2 * *", "0 0 5L * *"} {
		_, _, err := parseSpec(bad, time.UTC)
		require.ErrorIs(t, err, pglock.ErrInvalidSpec, bad)
	}
}

// A tick's jitter is in [0, J), the same on every call (every instance), spread over the range,
// and never more than J whatever the tick (temporal #3059: a jitter of up to 50 days).
func TestJitterIsDeterministicAndBounded(t *testing.T) {
	t.Parallel()
	const j = 30 * time.Second
	seen := map[time.Duration]bool{}
	tick := at(t, "2026-01-01T00:00:00Z")
	for i := range 5000 {
		tick = tick.Add(time.Minute)
		off := jitterOf("tenant-42", tick, j)
		require.True(t, off >= 0 && off < j, "tick %d: %s", i, off)
		require.Equal(t, off, jitterOf("tenant-42", tick, j))
		seen[off.Truncate(time.Second)] = true
	}
	require.Len(t, seen, 30, "spread over every second of the range")
	require.Zero(t, jitterOf("tenant-42", tick, 0))
	require.NotEqual(t, jitterOf("a", tick, time.Hour), jitterOf("b", tick, time.Hour), "schedules spread apart")
}

// A jittered tick waits for its fire time, and is then claimed under its own time: the ledger
// stays keyed on the nominal tick.
func TestJitteredTickWaitsForItsOffsetAndKeepsItsTime(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@every 1m", "UTC")
	set := settings{catchUp: CatchUpSkip, window: time.Hour}
	fire := func(at time.Time) time.Time { return at.Add(20 * time.Second) }
	nominal := at(t, "2026-05-01T10:01:00Z")
	watermark := nominal.Add(-time.Minute)
	ticks, until := plan(s, set, watermark, nominal.Add(19*time.Second), fire)
	require.Empty(t, ticks, "not yet: its jitter has not come")
	require.Equal(t, watermark, until, "and the watermark stays")
	ticks, until = plan(s, set, watermark, nominal.Add(20*time.Second), fire)
	require.Equal(t, []tick{{at: nominal, kind: "scheduled"}}, ticks)
	require.Equal(t, nominal, until)
}

// An update that shortens the jitter of the tick in flight, so that its new fire time has
// passed, runs it at once, on time: it is not recorded missed however late the update came.
func TestAShortenedJitterRunsTheTickInFlightAtOnce(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "@every 1h", "UTC")
	nominal := at(t, "2026-05-01T10:00:00Z")
	updated := nominal.Add(50 * time.Minute) // the new jitter, a minute at most, had passed long before
	e := &entry{name: "in-flight", sched: s, set: settings{catchUp: CatchUpSkip, window: time.Hour, jitter: time.Minute}, definedAt: updated}
	require.Equal(t, updated, e.fire(nominal))
	ticks, until := plan(s, e.set, nominal.Add(-time.Hour), updated.Add(time.Second), e.fire)
	require.Equal(t, []tick{{at: nominal, kind: "scheduled"}}, ticks)
	require.Equal(t, nominal, until)
	later := nominal.Add(time.Hour)
	require.Equal(t, later.Add(jitterOf("in-flight", later, time.Minute)), e.fire(later), "the next tick keeps its jitter")
}

// A jitter must be shorter than the shortest interval between ticks, a daylight-saving change
// included: otherwise a tick could fire after the next one.
func TestJitterMustBeShorterThanTheShortestInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec   string
		jitter time.Duration
		ok     bool
	}{
		{"@every 1m", 59 * time.Second, true},
		{"@every 1m", time.Minute, false},
		{"CRON_TZ=America/Los_Angeles 30 2 * * *", 22 * time.Hour, true},
		{"CRON_TZ=America/Los_Angeles 30 2 * * *", 23*time.Hour + 30*time.Minute, false}, // spring forward: 23 h
		{"0 0 9-17 * * MON-FRI", 59 * time.Minute, true},
		{"0 0 9-17 * * MON-FRI", time.Hour, false},
	} {
		_, _, _, err := compile(c.spec, &Options{Jitter: c.jitter})
		if c.ok {
			require.NoError(t, err, "%s with %s", c.spec, c.jitter)
		} else {
			require.ErrorIs(t, err, pglock.ErrInvalidArgument, "%s with %s", c.spec, c.jitter)
		}
	}
}
