package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// check reads what the scene did from the database and says whether every guarantee held.
func check(ctx context.Context, pool *pgxpool.Pool, deliveries int) (string, bool) {
	ok := true
	var parts []string
	fail := func(format string, args ...any) {
		ok = false
		parts = append(parts, "FAILED: "+fmt.Sprintf(format, args...))
	}
	query := func(dst []any, sql string, args ...any) bool {
		if err := pool.QueryRow(ctx, sql, args...).Scan(dst...); err != nil {
			fail("%v", err)
			return false
		}
		return true
	}

	var effects, distinct, succeeded, busiest int
	if query([]any{&effects, &distinct}, `SELECT count(*), count(DISTINCT job) FROM demo_effects`) &&
		query([]any{&succeeded}, `SELECT count(*) FROM pglock_jobs WHERE status = 'succeeded'`) &&
		query([]any{&busiest}, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) OVER (ORDER BY at
			RANGE BETWEEN interval '999 milliseconds' PRECEDING AND CURRENT ROW) AS n FROM demo_effects) AS w`) {
		if effects == jobCount && distinct == jobCount && succeeded == jobCount {
			parts = append(parts, fmt.Sprintf("%d/%d jobs, each effect exactly once (%d deliveries, %d duplicates answered)",
				distinct, jobCount, deliveries, deliveries-jobCount))
		} else {
			fail("jobs: %d effects of %d distinct jobs (%d recorded succeeded), want %d of %d", effects, distinct, succeeded, jobCount, jobCount)
		}
		if busiest <= apiRate+apiBurst {
			parts = append(parts, fmt.Sprintf("rate limit %d/s held (at most %d calls in any second)", apiRate, busiest))
		} else {
			fail("rate limit %d/s (burst %d): %d calls in one second", apiRate, apiBurst, busiest)
		}
	}

	var ticks, duplicates, missed, notRun int
	if query([]any{&ticks, &duplicates, &missed}, `
		SELECT count(DISTINCT tick), count(*) - count(DISTINCT tick),
		       coalesce(extract(epoch FROM max(tick) - min(tick))::int / 2 + 1 - count(DISTINCT tick), 0)
		  FROM demo_ticks`) &&
		query([]any{&notRun}, `SELECT count(*) FROM pglock_cron_runs WHERE status NOT IN ('ran', 'running')`) {
		if duplicates == 0 && missed == 0 && notRun == 0 && ticks >= 8 {
			parts = append(parts, fmt.Sprintf("%d cron ticks, 0 duplicates, 0 missed", ticks))
		} else {
			fail("cron: %d ticks, %d duplicates, %d missed, %d recorded not run", ticks, duplicates, missed, notRun)
		}
	}

	var resign, crash time.Duration
	var terms, outOfOrder, rejected int
	if query([]any{&resign, &crash}, `
		SELECT (SELECT min(e.at) FROM demo_events e WHERE e.kind = 'elected' AND e.at > r.at) - r.at,
		       (SELECT min(e.at) FROM demo_events e WHERE e.kind = 'elected' AND e.at > k.at) - k.at
		  FROM demo_events r, demo_events k WHERE r.kind = 'resigned' AND k.kind = 'killed'`) &&
		query([]any{&terms, &outOfOrder, &rejected}, `
		SELECT count(*) FILTER (WHERE kind = 'elected'),
		       (SELECT count(*) FROM demo_events a JOIN demo_events b ON a.kind = 'elected' AND b.kind = 'elected'
		                                                     AND a.at < b.at AND a.term >= b.term),
		       count(*) FILTER (WHERE kind = 'stale-rejected')
		  FROM demo_events`) {
		if terms >= 3 && outOfOrder == 0 && rejected >= 1 {
			parts = append(parts, fmt.Sprintf("leader handoffs: resign %s, crash %s · %d terms, each larger · stale leader writes rejected: %d",
				resign.Round(time.Millisecond), crash.Round(100*time.Millisecond), terms, rejected))
		} else {
			fail("leader: %d terms (%d out of order), %d stale writes rejected", terms, outOfOrder, rejected)
		}
	}
	return strings.Join(parts, " · "), ok
}

// progress shows the scene as it goes: a bar redrawn in place on a terminal, a line every few
// seconds otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	last     time.Time
}

func newProgress(f *os.File) *progress {
	info, err := f.Stat()
	return &progress{w: f, terminal: err == nil && info.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) line(s string) { fmt.Fprintln(p.w, s) }

func (p *progress) status(ctx context.Context, pool *pgxpool.Pool, elapsed, total time.Duration) {
	if !p.terminal && time.Since(p.last) < 4*time.Second {
		return
	}
	p.last = time.Now()
	var jobs, ticks int
	var term int64
	var worker *int
	pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT job) FROM demo_effects), (SELECT count(DISTINCT tick) FROM demo_ticks),
		term, worker FROM demo_state`).Scan(&jobs, &ticks, &term, &worker)
	lead := "no leader yet"
	if worker != nil {
		lead = fmt.Sprintf("leader w%d (term %d)", *worker, term)
	}
	text := fmt.Sprintf("jobs %3d/%d · cron ticks %2d · %s", jobs, jobCount, ticks, lead)
	if !p.terminal {
		fmt.Fprintf(p.w, "  %4.1fs  %s\n", elapsed.Seconds(), text)
		return
	}
	const width = 24
	filled := min(width, int(float64(width)*elapsed.Seconds()/total.Seconds()))
	fmt.Fprintf(p.w, "\r  [%s%s] %s\x1b[K", strings.Repeat("#", filled), strings.Repeat(".", width-filled), text)
}

func (p *progress) done() {
	if p.terminal {
		fmt.Fprintln(p.w)
	}
}
