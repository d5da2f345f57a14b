package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// summary is what the checker found, and the run's figures.
type summary struct {
	elapsed  time.Duration
	workers  int
	faults   map[string]int
	failures []string

	sections, writes, staleRefused, staleAccepted, ticks, effects, leaderWrites int
	violations                                                                  map[string]int
	details                                                                     []string
}

// The checks: each counts the violations of one guarantee in the evidence. A query's count
// must be 0.
var checks = []struct{ name, sql string }{
	{"overlapping sections", `
		WITH s AS (
			SELECT name, token, min(at) FILTER (WHERE kind = 'enter') AS entered, max(at) FILTER (WHERE kind = 'leave') AS left_at
			  FROM chaos_writes WHERE kind IN ('enter', 'leave') GROUP BY name, token)
		SELECT count(*) FROM (
			SELECT left_at, lead(entered) OVER (PARTITION BY name ORDER BY entered) AS next
			  FROM s WHERE entered IS NOT NULL AND left_at IS NOT NULL) x
		 WHERE next < left_at`},
	// A write committed after a newer holder's (stale writes included) has an older token.
	{"stale lock writes accepted", `
		SELECT count(*) FROM (SELECT token, max(token) OVER (PARTITION BY name ORDER BY seq ROWS UNBOUNDED PRECEDING) AS newest
		                        FROM chaos_writes) w
		 WHERE token < newest`},
	{"cron ticks run twice", `
		SELECT count(*) FROM (SELECT tick FROM chaos_ticks GROUP BY tick HAVING count(*) > 1) t`},
	// Every tick from the first to the last the schedulers accounted for has its run, and none
	// was recorded missed: a scheduler lived throughout.
	{"cron ticks missed", `
		SELECT (SELECT count(*) FROM generate_series(
					(SELECT min(scheduled_time) FROM pglock_cron_runs WHERE kind IN ('scheduled', 'catch_up')),
					(SELECT max(scheduled_time) FROM pglock_cron_runs WHERE kind IN ('scheduled', 'catch_up')),
					interval '1 second') tick
				 WHERE NOT EXISTS (SELECT FROM pglock_cron_runs r WHERE r.scheduled_time = tick AND r.kind IN ('scheduled', 'catch_up')))
		     + (SELECT count(*) FROM pglock_cron_runs WHERE status = 'missed')`},
	{"cron runs recorded ran without their effect", `
		SELECT count(*) FROM pglock_cron_runs r
		 WHERE status = 'ran' AND NOT EXISTS (SELECT FROM chaos_ticks t WHERE t.tick = r.scheduled_time AND t.token = r.fencing_token)`},
	{"job effects twice", `
		SELECT count(*) FROM (SELECT key FROM chaos_effects GROUP BY key HAVING count(*) > 1) e`},
	// RunTx commits the effect with the job's record: one without the other is a lost write.
	{"job effects without their record, or records without their effect", `
		SELECT (SELECT count(*) FROM (SELECT DISTINCT key FROM chaos_effects) e
		         WHERE NOT EXISTS (SELECT FROM pglock_jobs j WHERE j.job_key = e.key AND j.status = 'succeeded'))
		     + (SELECT count(*) FROM pglock_jobs j
		         WHERE j.status = 'succeeded' AND NOT EXISTS (SELECT FROM chaos_effects e WHERE e.key = j.job_key))`},
	{"leader writes interleaved", `
		SELECT count(*) FROM (SELECT term, max(term) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS newest
		                        FROM chaos_leader_writes) w
		 WHERE term < newest`},
}

// check reads the evidence the workers left and counts violations of every guarantee.
func check(ctx context.Context, pool *pgxpool.Pool) (*summary, error) {
	s := &summary{violations: map[string]int{}}
	err := pool.QueryRow(ctx, `SELECT
			(SELECT count(DISTINCT (name, token)) FROM chaos_writes WHERE kind = 'leave'),
			(SELECT count(*) FROM chaos_writes WHERE kind <> 'stale'),
			(SELECT count(*) FROM chaos_stale_attempts WHERE NOT accepted),
			(SELECT count(*) FROM chaos_stale_attempts WHERE accepted),
			(SELECT count(*) FROM chaos_ticks),
			(SELECT count(*) FROM chaos_effects),
			(SELECT count(*) FROM chaos_leader_writes)`).
		Scan(&s.sections, &s.writes, &s.staleRefused, &s.staleAccepted, &s.ticks, &s.effects, &s.leaderWrites)
	if err != nil {
		return nil, err
	}
	for _, c := range checks {
		var n int
		if err := pool.QueryRow(ctx, c.sql).Scan(&n); err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		if n > 0 {
			s.violations[c.name] = n
			s.details = append(s.details, fmt.Sprintf("violation: %s: %d", c.name, n))
		}
	}
	return s, nil
}

// ok: no violation, no worker failed on its own, every kind of fault was injected, and the
// workers got work done.
func (s *summary) ok() bool {
	for _, kind := range []string{faultTerminate, faultPartition, faultLatency, faultPause, faultKill, faultRestart} {
		if s.faults[kind] == 0 {
			s.details = append(s.details, "no "+kind+" fault was injected: run longer")
			return false
		}
	}
	if s.sections == 0 || s.ticks == 0 || s.effects == 0 || s.leaderWrites == 0 {
		s.details = append(s.details, "a workload did nothing")
		return false
	}
	return len(s.violations) == 0 && len(s.failures) == 0
}

func (s *summary) line() string {
	violations := 0
	for _, n := range s.violations {
		violations += n
	}
	var faults []string
	total := 0
	for _, kind := range []string{faultTerminate, faultPartition, faultLatency, faultPause, faultKill, faultRestart} {
		faults = append(faults, fmt.Sprintf("%s %d", kind, s.faults[kind]))
		total += s.faults[kind]
	}
	ops := s.writes + s.ticks + s.effects + s.leaderWrites
	line := fmt.Sprintf("chaos: %s, %d workers: operations %d (%d fenced writes in %d critical sections, %d cron ticks, %d job effects, %d leader writes; stale writes %d refused, %d accepted before a newer holder); faults %d (%s); violations %d",
		s.elapsed.Round(time.Second), s.workers, ops, s.writes, s.sections, s.ticks, s.effects, s.leaderWrites,
		s.staleRefused, s.staleAccepted, total, strings.Join(faults, ", "), violations)
	if len(s.failures) > 0 {
		line += fmt.Sprintf("; worker failures %d", len(s.failures))
		s.details = append(s.details, s.failures...)
	}
	return line
}
