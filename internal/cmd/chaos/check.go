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
	name     string   // of the run: chaos, or ha
	kinds    []string // the faults it injects, each at least once
	extra    string   // what the run adds to the line
	elapsed  time.Duration
	workers  int
	faults   map[string]int
	failures []string

	sections, writes, staleRefused, staleAccepted, ticks, effects, leaderWrites, placeVisits int
	tickOutcomes                                                                             string // the ticks' runs by status
	violations                                                                               map[string]int
	details                                                                                  []string
}

// The checks: each counts the violations of one guarantee in the evidence. A query's count
// must be 0.
var checks = []struct{ name, sql string }{
	// A section lasts from its enter to the last write made with its token, stale ones too, in
	// commit order (seq), which no clock step can reorder.
	{"overlapping sections", `
		WITH s AS (
			SELECT name, token, min(seq) FILTER (WHERE kind = 'enter') AS entered, max(seq) AS ended
			  FROM chaos_writes GROUP BY name, token)
		SELECT count(*) FROM (
			SELECT ended, lead(entered) OVER (PARTITION BY name ORDER BY entered) AS next
			  FROM s WHERE entered IS NOT NULL) x
		 WHERE next < ended`},
	// A write committed after a larger token was granted for its name.
	{"stale lock writes accepted", `
		SELECT count(*) FROM chaos_writes w
		 WHERE EXISTS (SELECT FROM chaos_grants g WHERE g.name = w.name AND g.token > w.token AND g.seq < w.seq)`},
	{"cron ticks run twice", `
		SELECT count(*) FROM (SELECT tick FROM chaos_ticks GROUP BY tick HAVING count(*) > 1) t`},
	// Every tick from the first to the last that was due while the schedulers lived (the
	// workers were stopped at the 'stopping' mark; a tick's claim may take a poll and a lease
	// longer) has its run, and none was recorded missed.
	{"cron ticks missed", `
		SELECT (SELECT count(*) FROM generate_series(
					(SELECT min(scheduled_time) FROM pglock_cron_runs WHERE kind IN ('scheduled', 'catch_up')),
					(SELECT date_trunc('second', at) - interval '6 seconds' FROM chaos_marks WHERE mark = 'stopping'),
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
	// A leader's write committed after a later term was granted: leadership is the table lock
	// pglock.leader/<election>, its term the token.
	{"leader writes after a newer leader's election", `
		SELECT count(*) FROM chaos_leader_writes w
		 WHERE EXISTS (SELECT FROM chaos_grants g WHERE g.name = 'pglock.leader/chaos-leader' AND g.token > w.term AND g.seq < w.seq)`},
	// Places taken together: at each visit's entry, the visits inside (entered, and left after it
	// in commit order: a place is released only after its visit's leave commits) are at most the
	// global semaphore's places, and of a tenant at most its cap. A visit cut short by a fault has
	// no leave: it counts only at its entry.
	{"semaphore places over their limit", `
		WITH v AS (
			SELECT token, tenant, min(seq) FILTER (WHERE kind = 'enter') AS entered,
			       coalesce(max(seq) FILTER (WHERE kind = 'leave'), min(seq)) AS left_at
			  FROM chaos_places GROUP BY token, tenant)
		SELECT count(*) FROM v e
		 WHERE e.entered IS NOT NULL
		   AND ((SELECT count(*) FROM v i WHERE i.entered <= e.entered AND i.left_at >= e.entered) > ` + fmt.Sprint(globalPlaces) + `
		     OR (SELECT count(*) FROM v i WHERE i.tenant = e.tenant AND i.entered <= e.entered AND i.left_at >= e.entered) > ` + fmt.Sprint(tenantCap) + `)`},
	// No place or queue place outlives its holders: the workers stopped by closing their Lockers,
	// which give back what they held and leave the queues; those killed earlier, before the faults
	// ended, had their leases run out long before. So once the workers have exited, none is live.
	{"semaphore places or queue places left live after the workers stopped", `
		WITH stopped AS (SELECT at FROM chaos_marks WHERE mark = 'stopped')
		SELECT (SELECT count(*) FROM distributed_locks, stopped WHERE lock_name LIKE 'pglock.semaphore/chaos-%' AND expires_at > stopped.at)
		     + (SELECT count(*) FROM distributed_lock_waiters, stopped WHERE lock_name LIKE 'pglock.semaphore/chaos-%' AND expires_at > stopped.at)`},
	// Every workload did work after the last fault was undone: none was left broken.
	{"workloads that did not recover after the last fault", `
		WITH ended AS (SELECT at FROM chaos_marks WHERE mark = 'faults_ended')
		SELECT (NOT EXISTS (SELECT FROM chaos_writes, ended WHERE kind = 'leave' AND chaos_writes.at > ended.at))::int
		     + (NOT EXISTS (SELECT FROM chaos_ticks, ended WHERE tick > ended.at))::int
		     + (NOT EXISTS (SELECT FROM chaos_effects, ended WHERE chaos_effects.at > ended.at))::int
		     + (NOT EXISTS (SELECT FROM chaos_leader_writes, ended WHERE NOT stale AND chaos_leader_writes.at > ended.at))::int
		     + (NOT EXISTS (SELECT FROM chaos_places, ended WHERE kind = 'leave' AND chaos_places.at > ended.at))::int`},
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
			(SELECT count(*) FROM chaos_leader_writes),
			(SELECT count(*) FROM chaos_places WHERE kind = 'leave')`).
		Scan(&s.sections, &s.writes, &s.staleRefused, &s.staleAccepted, &s.ticks, &s.effects, &s.leaderWrites, &s.placeVisits)
	if err != nil {
		return nil, err
	}
	// Every tick accounted for: how. A tick claimed by a worker that then died or froze is
	// recorded abandoned and not run again (cron runs a tick at most once).
	if err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(status || ' ' || n, ', ' ORDER BY n DESC), 'none') FROM (
			SELECT status, count(*) AS n FROM pglock_cron_runs WHERE kind IN ('scheduled', 'catch_up') GROUP BY status) r`).
		Scan(&s.tickOutcomes); err != nil {
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

// ok: no violation, no failure of the suite itself, and every kind of fault was injected. It
// adds to the details what is wrong.
func (s *summary) ok() bool {
	s.details = append(s.details, s.failures...)
	for _, kind := range s.kinds {
		if s.faults[kind] == 0 {
			s.details = append(s.details, "no "+kind+" fault was injected: run longer")
			return false
		}
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
	for _, kind := range s.kinds {
		faults = append(faults, fmt.Sprintf("%s %d", kind, s.faults[kind]))
		total += s.faults[kind]
	}
	ops := s.writes + s.ticks + s.effects + s.leaderWrites + s.placeVisits
	line := fmt.Sprintf("%s: %s, %d workers: operations %d (%d fenced writes in %d critical sections, %d cron ticks run (ticks: %s), %d job effects, %d leader writes, %d visits under a tenant's and a global semaphore's places taken together; stale writes %d refused, %d accepted before a newer holder); faults %d (%s); violations %d",
		s.name, s.elapsed.Round(time.Second), s.workers, ops, s.writes, s.sections, s.ticks, s.tickOutcomes, s.effects, s.leaderWrites, s.placeVisits,
		s.staleRefused, s.staleAccepted, total, strings.Join(faults, ", "), violations)
	if s.extra != "" {
		line += "; " + s.extra
	}
	if len(s.failures) > 0 {
		line += fmt.Sprintf("; worker failures %d", len(s.failures))
	}
	return line
}
