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

	var effects, distinct, succeeded, busiest, answered, ran int
	if query([]any{&effects, &distinct}, `SELECT count(*), count(DISTINCT job) FROM demo_effects`) &&
		query([]any{&succeeded}, `SELECT count(*) FROM pglock_jobs WHERE status = 'succeeded'`) &&
		query([]any{&answered, &ran}, `SELECT count(*), count(*) FILTER (WHERE outcome = 'ran') FROM demo_deliveries`) &&
		query([]any{&busiest}, `SELECT coalesce(max(n), 0) FROM (SELECT count(*) OVER (ORDER BY at
			RANGE BETWEEN interval '999 milliseconds' PRECEDING AND CURRENT ROW) AS n FROM demo_effects) AS w`) {
		if effects == jobCount && distinct == jobCount && succeeded == jobCount && answered == deliveries && ran == jobCount {
			parts = append(parts, fmt.Sprintf("%d/%d jobs, each effect exactly once (%d deliveries answered, %d of them duplicates)",
				distinct, jobCount, answered, answered-ran))
		} else {
			fail("jobs: %d effects of %d distinct jobs (%d recorded succeeded), %d of %d deliveries answered, %d ran; want %d of each",
				effects, distinct, succeeded, answered, deliveries, ran, jobCount)
		}
		if busiest <= apiRate+apiBurst {
			parts = append(parts, fmt.Sprintf("rate limit %d/s held (at most %d calls in any second)", apiRate, busiest))
		} else {
			fail("rate limit %d/s (burst %d): %d calls in one second", apiRate, apiBurst, busiest)
		}
	}

	// Every 2 s tick from the scene's start to its end, by the database's clock, ran exactly once.
	var expected, ticks, duplicates, missed, notRun int
	if query([]any{&expected, &ticks, &duplicates, &missed}, `
		WITH scene AS (SELECT (SELECT at FROM demo_events WHERE kind = 'scene-start') AS a,
		                      (SELECT at FROM demo_events WHERE kind = 'scene-end') AS b),
		     due AS (SELECT to_timestamp(s) AS tick
		               FROM scene, generate_series(ceil(extract(epoch FROM a) / 2)::bigint * 2,
		                                           floor(extract(epoch FROM b) / 2)::bigint * 2, 2) AS s),
		     ran AS (SELECT tick, count(*) AS n FROM demo_ticks GROUP BY tick)
		SELECT (SELECT count(*) FROM due),
		       (SELECT count(*) FROM due JOIN ran USING (tick)),
		       (SELECT coalesce(sum(n - 1), 0) FROM ran),
		       (SELECT count(*) FROM due LEFT JOIN ran USING (tick) WHERE ran.tick IS NULL)`) &&
		query([]any{&notRun}, `SELECT count(*) FROM pglock_cron_runs WHERE status NOT IN ('ran', 'running')`) {
		if duplicates == 0 && missed == 0 && notRun == 0 && expected >= int(sceneTime/(2*time.Second))-1 {
			parts = append(parts, fmt.Sprintf("%d cron ticks, 0 duplicates, 0 missed", ticks))
		} else {
			fail("cron: %d of %d ticks ran, %d duplicates, %d missed, %d recorded not run", ticks, expected, duplicates, missed, notRun)
		}
	}

	// Handoffs by the database's clock; fenced writes never go back to an older term; the
	// deposed leader's fenced write was refused, and none committed.
	var resign, crash time.Duration
	var terms, outOfOrder, inverted, rejected, committed int
	if query([]any{&resign, &crash}, `
		WITH r AS (SELECT min(at) AS at FROM demo_events WHERE kind = 'resigned'),
		     k AS (SELECT min(at) AS at FROM demo_events WHERE kind = 'killed')
		SELECT (SELECT min(e.at) FROM demo_events e, r WHERE e.kind = 'elected' AND e.at > r.at) - (SELECT at FROM r),
		       (SELECT min(e.at) FROM demo_events e, k WHERE e.kind = 'elected' AND e.at > k.at) - (SELECT at FROM k)`) &&
		query([]any{&terms, &outOfOrder, &inverted, &rejected, &committed}, `
		SELECT count(*) FILTER (WHERE kind = 'elected'),
		       (SELECT count(*) FROM demo_events a JOIN demo_events b ON a.kind = 'elected' AND b.kind = 'elected'
		                                                     AND a.at < b.at AND a.term >= b.term),
		       (SELECT count(*) FROM demo_reconcile a JOIN demo_reconcile b ON a.id < b.id AND a.term > b.term),
		       count(*) FILTER (WHERE kind = 'stale-rejected'),
		       count(*) FILTER (WHERE kind IN ('stale-committed', 'stale-failed'))
		  FROM demo_events`) {
		if terms >= 3 && outOfOrder == 0 && inverted == 0 && rejected >= 1 && committed == 0 {
			parts = append(parts, fmt.Sprintf("leader handoffs: resign %s, crash %s · %d terms, each larger, no write of an older term after a newer · deposed leader's fenced writes rejected: %d",
				resign.Round(time.Millisecond), crash.Round(100*time.Millisecond), terms, rejected))
		} else {
			fail("leader: %d terms (%d out of order), %d writes of an older term after a newer, %d stale writes rejected, %d not",
				terms, outOfOrder, inverted, rejected, committed)
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
	var term *int64
	var worker *int
	pool.QueryRow(ctx, `SELECT (SELECT count(DISTINCT job) FROM demo_effects), (SELECT count(DISTINCT tick) FROM demo_ticks),
		l.term, l.worker FROM (SELECT 1) AS one LEFT JOIN (SELECT term, worker FROM demo_reconcile ORDER BY id DESC LIMIT 1) AS l ON true`).
		Scan(&jobs, &ticks, &term, &worker)
	lead := "no leader yet"
	if worker != nil {
		lead = fmt.Sprintf("leader w%d (term %d)", *worker, *term)
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
