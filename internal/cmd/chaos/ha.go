package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/testdb"
)

// faultKillPrimary is make ha's one fault: the primary's postmaster killed with SIGKILL.
const faultKillPrimary = "kill-primary"

// controlHA is make ha: the chaos workers on two PostgreSQL nodes under Patroni (with one etcd),
// connected as users behind Patroni are, with a multi-host connection string
// (target_session_attrs=read-write). Halfway through, the primary's postmaster is killed with
// SIGKILL (asynchronous: after its WAL sender was frozen for a second, so that the standby misses
// what the primary acknowledged meanwhile); Patroni promotes the standby, and every workload must
// resume on it by itself, no process restarted. Then the checker reads the evidence on the new
// primary, as chaos's does, and the workers' ledgers are checked against it.
func controlHA(duration time.Duration, workers int, synchronous, verbose bool) int {
	began := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "ha: %v\n", err)
		return 1
	}
	mode := "asynchronous"
	if synchronous {
		mode = "synchronous"
	}
	p, err := testdb.StartPatroni(ctx, &testdb.PatroniOptions{Synchronous: synchronous})
	if err != nil {
		return fail(fmt.Errorf("a Patroni cluster of its own: %w", err))
	}
	defer p.Close()
	logDir, err := os.MkdirTemp("", "pglock-ha-")
	if err != nil {
		return fail(err)
	}
	c := &controller{url: p.URL("chaos"), logDir: logDir, faults: map[string]int{}, verbose: verbose, began: began}
	admin, err := c.setUp(ctx, p.URL("postgres"), p.URL("chaos"))
	if err != nil {
		return fail(err)
	}
	defer admin.Close()
	defer c.stopWorkers()
	if err := c.startWorkers(workers); err != nil {
		return fail(err)
	}
	fmt.Printf("ha: %d workers on two nodes under Patroni, %s replication; the primary killed after %s (logs in %s)\n",
		workers, mode, duration/2, logDir)

	if !sleep(ctx, duration/2) {
		return fail(ctx.Err())
	}
	primary, err := p.Primary()
	if err != nil {
		return fail(err)
	}
	if !synchronous {
		// What makes an asynchronous failover lose: commits the primary acknowledged and the
		// standby never received. Its WAL sender is frozen for a second first, then killed.
		sender, err := withholdWAL(ctx, admin)
		if err != nil {
			return fail(fmt.Errorf("freezing the primary's WAL sender: %w", err))
		}
		defer syscall.Kill(sender, syscall.SIGKILL) // stopped, it outlives its postmaster
		if !sleep(ctx, time.Second) {
			return fail(ctx.Err())
		}
	}
	killed := time.Now()
	if err := p.KillPostmaster(primary); err != nil {
		return fail(fmt.Errorf("killing node %d's postmaster: %w", primary, err))
	}
	c.count(faultKillPrimary, fmt.Sprintf("node %d", primary))
	if err := p.WaitPrimary(ctx, 1-primary); err != nil {
		return fail(fmt.Errorf("%w\n%s", err, p.Log()))
	}
	promoted := time.Since(killed)
	if err := retryMark(ctx, admin, "faults_ended"); err != nil {
		return fail(err)
	}
	if !sleep(ctx, max(duration/2, quietSpell)) {
		return fail(ctx.Err())
	}
	if err := retryMark(ctx, admin, "stopping"); err != nil {
		return fail(err)
	}
	c.stopWorkers()
	if err := retryMark(ctx, admin, "stopped"); err != nil {
		return fail(err)
	}

	s, err := check(ctx, admin)
	if err != nil {
		return fail(fmt.Errorf("checking the evidence: %w", err))
	}
	r, err := reckon(ctx, admin, logDir)
	if err != nil {
		return fail(fmt.Errorf("checking the workers' ledgers: %w", err))
	}
	if r.grantedTwice > 0 { // in either mode
		s.violations["tokens acknowledged to two holders"] = r.grantedTwice
		s.details = append(s.details, fmt.Sprintf("violation: tokens acknowledged to two holders: %d", r.grantedTwice))
	}
	if r.grants == 0 || r.effects == 0 || r.ticks == 0 {
		c.fail(fmt.Sprintf("the ledgers hold too little to check: %d grants, %d job outcomes, %d ticks", r.grants, r.effects, r.ticks))
	}
	if synchronous { // nothing acknowledged is lost, and no holder learns of its loss too late
		for what, n := range map[string]int{
			"acknowledged grants missing on the new primary": r.lostGrants, "acknowledged job outcomes missing": r.lostEffects,
			"acknowledged cron runs missing": r.lostTicks, "losses told after the lock or leadership was granted again": r.regrantedFirst,
		} {
			if n > 0 {
				s.violations[what] = n
				s.details = append(s.details, fmt.Sprintf("violation: %s: %d", what, n))
			}
		}
	}
	var firstGrant time.Time
	// The new primary's grants are those of the newest token epoch: one the old primary
	// committed as it was killed does not count.
	if err := admin.QueryRow(ctx, `SELECT coalesce(min(at), 'epoch') FROM chaos_grants
		WHERE token >> 40 = (SELECT max(token >> 40) FROM chaos_grants)`).Scan(&firstGrant); err != nil {
		return fail(err)
	}
	s.name, s.kinds = "ha ("+mode+")", []string{faultKillPrimary}
	s.extra = fmt.Sprintf("failover: node %d's postmaster killed, node %d primary %.1fs later, its first grant %.1fs after the kill; %s",
		primary, 1-primary, promoted.Seconds(), firstGrant.Sub(killed).Seconds(), r.line())
	c.fill(s, workers)
	passed := s.ok()
	if firstGrant.Before(killed) {
		s.details = append(s.details, "no lock was granted on the new primary")
		passed = false
	}
	return c.report(s, passed)
}

// withholdWAL stops (SIGSTOP) the primary's WAL sender, and returns its process id.
func withholdWAL(ctx context.Context, admin *pgxpool.Pool) (int, error) {
	var pid int
	if err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_replication LIMIT 1`).Scan(&pid); err != nil {
		return 0, err
	}
	return pid, syscall.Kill(pid, syscall.SIGSTOP)
}

// retryMark marks the evidence once the pool reaches the primary again: it may be failing over.
func retryMark(ctx context.Context, admin *pgxpool.Pool, what string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := mark(ctx, admin, what)
		if err == nil || !sleep(ctx, 200*time.Millisecond) {
			return err
		}
	}
}

// sleep waits for d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
