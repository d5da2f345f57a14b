package cron

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
		ticks, until := plan(s, set, watermark, now)
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
			ticks, until := plan(s, settings{catchUp: c.catchUp, window: c.window}, watermark, c.now)
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
	ticks, until := plan(s, settings{catchUp: CatchUpSkip, window: time.Hour}, now.Add(-7*24*time.Hour), now)
	require.Equal(t, now, until)
	require.Equal(t, []tick{
		{at: now.Add(-7*24*time.Hour + time.Second), kind: "missed", missedUntil: now.Add(-time.Second), missedCount: -1},
		{at: now, kind: "scheduled"},
	}, ticks)
}
