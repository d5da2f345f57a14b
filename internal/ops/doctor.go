package ops

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/cron"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/migrations"
)

// Severity is how much a finding of Diagnose matters.
type Severity string

// The severities, from none to most.
const (
	SeverityOK      Severity = "ok"
	SeverityWarning Severity = "warning" // worth a look: nothing is broken yet
	SeverityProblem Severity = "problem" // something pglock promises is at risk
)

// Finding is one check's verdict: what it found and, unless all is well, what to do.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Detail   string   `json:"detail"`
	Fix      string   `json:"fix,omitempty"`
}

// The defaults of DoctorOptions.
const (
	// DefaultDoctorGrace is how long a row may stay expired, or an election leaderless with
	// candidates waiting, before Diagnose names it: a lease that ran out a moment ago is ordinary.
	DefaultDoctorGrace = time.Minute
	// DefaultAdvisoryHeld is how long an advisory lock may be held by an idle session before
	// Diagnose names it.
	DefaultAdvisoryHeld = time.Hour
)

// DoctorOptions tune Diagnose; zero fields mean the defaults.
type DoctorOptions struct {
	Grace        time.Duration // see DefaultDoctorGrace
	AdvisoryHeld time.Duration // see DefaultAdvisoryHeld
}

// Diagnose checks the installation pool reaches, each check a Finding in a fixed order: the
// schema's version and drift, expired rows awaiting gc, elections without a leader, the session's
// statement and idle-in-transaction timeouts, schedules no instance runs, planner statistics
// that say a table is empty when it is not, advisory locks held long by idle sessions, the
// clock offsets the live scheduler instances measured, the parts of pglock the role is granted
// only in part, and whether the connection goes through a pooler.
func Diagnose(ctx context.Context, pool *pgxpool.Pool, opts DoctorOptions) ([]Finding, error) {
	grace := opts.Grace
	if grace <= 0 {
		grace = DefaultDoctorGrace
	}
	held := opts.AdvisoryHeld
	if held <= 0 {
		held = DefaultAdvisoryHeld
	}
	status, err := migrations.Version(ctx, pool)
	if err != nil {
		return nil, err
	}
	findings := []Finding{schemaFinding(status)}
	if status.Version == 0 || status.Dirty {
		return findings, nil // the tables the other checks read may not be there
	}
	q := db.New(db.Translating(pool))
	rows, err := q.DoctorRows(ctx, grace.Milliseconds())
	if err != nil {
		return nil, err
	}
	expired := Finding{Check: "expired rows", Severity: SeverityOK, Detail: "no lock row or queue place expired more than " + grace.String() + " ago"}
	if n := rows.ExpiredLocks + rows.ExpiredWaiters; n > 0 {
		expired = Finding{Check: "expired rows", Severity: SeverityWarning,
			Detail: fmt.Sprintf("%d lock rows and %d queue places expired more than %s ago: they cost every scan of their table", rows.ExpiredLocks, rows.ExpiredWaiters, grace),
			Fix:    "run `pglockctl gc` (or call pglock_gc()) regularly, say from a cron schedule"}
	}
	leaders := Finding{Check: "elections", Severity: SeverityOK, Detail: "every election with candidates waiting has a leader"}
	if len(rows.Leaderless) > 0 {
		leaders = Finding{Check: "elections", Severity: SeverityProblem,
			Detail: fmt.Sprintf("no leader for over %s while candidates wait: %s", grace, strings.Join(rows.Leaderless, ", ")),
			Fix:    "see the candidates with `pglockctl leader list`; a leader whose lease ran out without a handoff means its candidates do not poll: check their processes and their connection to the database"}
	}
	findings = append(findings, expired, leaders)

	timeouts, err := q.DoctorTimeouts(ctx)
	if err != nil {
		return nil, err
	}
	findings = append(findings, timeoutFindings(time.Duration(timeouts.StatementTimeoutMs)*time.Millisecond,
		time.Duration(timeouts.IdleTimeoutMs)*time.Millisecond)...)

	schedules, err := Schedules(ctx, pool)
	if err != nil {
		return nil, err
	}
	findings = append(findings, scheduleFinding(schedules))

	stale, err := q.DoctorStatistics(ctx)
	if err != nil {
		return nil, err
	}
	stats := Finding{Check: "statistics", Severity: SeverityOK, Detail: "no table of pglock's is planned as empty while it is not"}
	if len(stale) > 0 {
		tables := make([]string, len(stale))
		for i, r := range stale {
			tables[i] = fmt.Sprintf("%s (%d pages)", r.TableName, r.Pages)
		}
		stats = Finding{Check: "statistics", Severity: SeverityWarning,
			Detail: "planner statistics say empty (an ANALYZE ran while it was), but it is not: claims and polls may scan it: " + strings.Join(tables, ", "),
			Fix:    "ANALYZE those tables; let autovacuum analyze them (do not disable it for them)"}
	}
	holders, err := q.DoctorAdvisory(ctx, held.Milliseconds())
	if err != nil {
		return nil, err
	}
	advisory := Finding{Check: "advisory", Severity: SeverityOK, Detail: "no idle session has held an advisory lock for " + held.String()}
	if len(holders) > 0 {
		sessions := make([]string, len(holders))
		for i, h := range holders {
			sessions[i] = fmt.Sprintf("pid %d (%s): %d locks, idle for %s", h.Pid, cmp.Or(h.ApplicationName, "no application name"), h.Locks,
				(time.Duration(h.IdleMs) * time.Millisecond).Round(time.Second))
		}
		advisory = Finding{Check: "advisory", Severity: SeverityWarning,
			Detail: fmt.Sprintf("sessions idle for over %s hold advisory locks (held at least that long): %s", held, strings.Join(sessions, "; ")),
			Fix:    "see them with `pglockctl list --kind advisory`; end a holder that is gone with `pglockctl release --advisory KEY --terminate`"}
	}
	findings = append(findings, stats, advisory)

	now, err := DatabaseNow(ctx, pool)
	if err != nil {
		return nil, err
	}
	instances, err := Instances(ctx, pool, now)
	if err != nil {
		return nil, err
	}
	findings = append(findings, clockFinding(instances))

	privileges, err := privilegeFinding(ctx, q, timeouts.Role)
	if err != nil {
		return nil, err
	}
	findings = append(findings, privileges)

	pooler, err := poolerFinding(ctx, pool)
	if err != nil {
		return nil, err
	}
	return append(findings, pooler), nil
}

// poolerFinding tells whether pglockctl's connection reaches PostgreSQL directly: the server
// sees it come from the port it left from, unless something sits between them (PgBouncer, a
// proxy, or a NAT), whose pooling mode pglockctl cannot see.
func poolerFinding(ctx context.Context, pool *pgxpool.Pool) (Finding, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Finding{}, db.Translate(err)
	}
	defer conn.Release()
	f := Finding{Check: "pooler", Severity: SeverityOK, Detail: "this connection reaches PostgreSQL directly"}
	local, ok := conn.Conn().PgConn().Conn().LocalAddr().(*net.TCPAddr)
	if !ok {
		f.Detail = "this connection reaches PostgreSQL over a Unix socket: directly"
		return f, nil
	}
	seen, err := db.New(db.Translating(conn)).DoctorClientPort(ctx)
	if err != nil {
		return Finding{}, err
	}
	if int(seen) != local.Port {
		f.Severity = SeverityWarning
		f.Detail = fmt.Sprintf("PostgreSQL sees this connection come from port %d, not %d: something sits between (PgBouncer, a proxy, or a NAT). In transaction pooling, prepared statements and LISTEN do not survive from one transaction to the next", seen, local.Port)
		f.Fix = "if it is PgBouncer in transaction mode, follow docs/pgbouncer.md: pgx's default_query_exec_mode=exec (or max_prepared_statements on PgBouncer ≥ 1.21), a ListenerConnConfig that reaches PostgreSQL directly (or DisableNotifications), advisory session locks on a direct pool, ignore_startup_parameters = extra_float_digits,options"
	}
	return f, nil
}

// privilegeFinding says which parts of pglock (Grants) the current role may use. A part whose
// functions are granted in full, with its tables, or whose functions are not granted at all, is
// a choice; one granted in part is a problem: its calls fail on what was left out (a grant made
// from an older version of docs/sql.md, say).
func privilegeFinding(ctx context.Context, q *db.Queries, role string) (Finding, error) {
	var usable, partial []string
	parts := map[string]int{} // how many parts each function is in: one shared says nothing of either
	for _, g := range Grants {
		for _, f := range g.Functions {
			parts[f]++
		}
	}
	for _, g := range Grants {
		objects, err := q.DoctorPrivileges(ctx, db.DoctorPrivilegesParams{Functions: g.Functions, Tables: g.Tables})
		if err != nil {
			return Finding{}, err
		}
		var granted bool
		var missing []string
		for i, o := range objects {
			if i < len(g.Functions) && o.Granted && parts[o.Object] == 1 {
				granted = true
			}
			if o.Present && !o.Granted { // an object that is not there is the schema check's
				missing = append(missing, o.Object)
			}
		}
		switch {
		case !granted: // not granted: the role may read the tables, or run a shared function, for another part
		case len(missing) > 0:
			partial = append(partial, fmt.Sprintf("%s (missing %s)", g.Part, strings.Join(missing, ", ")))
		default:
			usable = append(usable, g.Part)
		}
	}
	if len(partial) > 0 {
		return Finding{Check: "privileges", Severity: SeverityProblem,
			Detail: fmt.Sprintf("role %s is granted part of: %s", role, strings.Join(partial, "; ")),
			Fix:    "grant the rest as docs/sql.md lists it (GRANT EXECUTE ON FUNCTION …, GRANT SELECT ON …)"}, nil
	}
	if len(usable) == 0 {
		return Finding{Check: "privileges", Severity: SeverityOK, Detail: fmt.Sprintf("role %s may use no part of pglock (no grant, or none made)", role)}, nil
	}
	return Finding{Check: "privileges", Severity: SeverityOK, Detail: fmt.Sprintf("role %s may use: %s", role, strings.Join(usable, ", "))}, nil
}

// maxClockOffset is the offset from the database's clock past which a host's clock is named: a
// scheduler logs a warning past it too. pglock keeps time by the database's clock, so an offset
// breaks no lease or tick; it tells of a host whose time sync is broken, which the application
// itself may trip over.
const maxClockOffset = time.Second

// clockFinding reports each live scheduler instance's clock offset, as it last measured it.
func clockFinding(instances []Instance) Finding {
	var off, all []string
	for _, in := range instances {
		sign := ""
		if in.Offset >= 0 {
			sign = "+"
		}
		s := fmt.Sprintf("%s %s%v (±%v)", in.Name, sign, in.Offset.Round(time.Millisecond), in.Uncertainty.Round(time.Millisecond))
		all = append(all, s)
		if in.Offset > maxClockOffset || in.Offset < -maxClockOffset {
			off = append(off, s)
		}
	}
	switch {
	case len(off) > 0:
		return Finding{Check: "clocks", Severity: SeverityWarning,
			Detail: fmt.Sprintf("%d instances' clocks are over %s off the database's: %s", len(off), maxClockOffset, strings.Join(off, ", ")),
			Fix:    "fix time sync (NTP, chrony) on those hosts: pglock keeps time by the database's clock, the rest of the application may not"}
	case len(all) == 0:
		return Finding{Check: "clocks", Severity: SeverityOK, Detail: "no live scheduler instance has measured its clock"}
	}
	return Finding{Check: "clocks", Severity: SeverityOK, Detail: "live instances' offsets from the database's clock: " + strings.Join(all, ", ")}
}

// The shortest timeouts doctor lets pass: pglock's statements may wait a while on a row or an
// advisory lock (a semaphore's attempt behind others, a release behind a renewal), and
// jobs.RunTx keeps its transaction open, idle, while its function runs.
const (
	minStatementTimeout = 5 * time.Second
	minIdleTimeout      = 30 * time.Second
)

// timeoutFindings judges the session's statement and idle-in-transaction timeouts (0: none).
func timeoutFindings(statement, idle time.Duration) []Finding {
	st := Finding{Check: "timeouts", Severity: SeverityOK, Detail: "statement_timeout " + timeoutString(statement) + ": pglock's statements are not cut short"}
	if statement > 0 && statement < minStatementTimeout {
		st.Severity = SeverityWarning
		st.Detail = "statement_timeout is " + statement.String() + ": a semaphore's attempt queued behind others, or a release waiting for a renewal, can be canceled under load (the Locker retries, later)"
		st.Fix = "ALTER ROLE <pglock's role> SET statement_timeout = '" + minStatementTimeout.String() + "' (or more, or 0)"
	}
	it := Finding{Check: "timeouts", Severity: SeverityOK, Detail: "idle_in_transaction_session_timeout " + timeoutString(idle) + ": RunTx's transactions may stay open while their functions run"}
	if idle > 0 && idle < minIdleTimeout {
		it.Severity = SeverityWarning
		it.Detail = "idle_in_transaction_session_timeout is " + idle.String() + ": a jobs.RunTx function that works longer between statements loses its connection, and its run"
		it.Fix = "ALTER ROLE <the role RunTx connects as> SET idle_in_transaction_session_timeout = '" + minIdleTimeout.String() + "' (or more, or 0); pglock's fences bound their own transactions"
	}
	return []Finding{st, it}
}

func timeoutString(d time.Duration) string {
	if d == 0 {
		return "is off"
	}
	return "is " + d.String()
}

// scheduleFinding names the schedules no instance runs: one added in code that no scheduler
// has registered for cron.OrphanedAfter, a runtime one whose kind no scheduler handles. Paused
// and finished schedules are left out: nobody expects them to run.
func scheduleFinding(schedules []cron.ScheduleInfo) Finding {
	var idle []string
	for _, s := range schedules {
		switch {
		case s.Paused || s.Finished:
		case s.Orphaned:
			idle = append(idle, s.Name+" (no instance has registered it)")
		case s.Unhandled:
			idle = append(idle, fmt.Sprintf("%s (no instance handles kind %q)", s.Name, s.Kind))
		}
	}
	if len(idle) == 0 {
		return Finding{Check: "schedules", Severity: SeverityOK, Detail: fmt.Sprintf("every one of %d schedules has an instance to run it", len(schedules))}
	}
	return Finding{Check: "schedules", Severity: SeverityWarning,
		Detail: fmt.Sprintf("%d schedules run nowhere, their ticks are missed: %s", len(idle), strings.Join(idle, ", ")),
		Fix:    "start an instance that adds or handles them, or pause them (`pglockctl cron pause`) or delete them (`pglockctl cron delete`)"}
}

// schemaFinding judges the installed version against these files, and its drift.
func schemaFinding(s migrations.Status) Finding {
	f := Finding{Check: "schema"}
	switch {
	case s.Version == 0:
		f.Severity, f.Detail, f.Fix = SeverityProblem, "pglock's SQL is not installed", "run `pglockctl migrate up`"
	case s.Dirty:
		f.Severity, f.Detail = SeverityProblem, fmt.Sprintf("version %d is dirty: a migration to it did not finish", s.Version)
		f.Fix = "see docs/sql.md: finish or undo the migration by hand, then `pglockctl migrate force N`"
	case s.Version > s.Latest:
		f.Severity, f.Detail = SeverityWarning, fmt.Sprintf("version %d is newer than this pglockctl's %d", s.Version, s.Latest)
		f.Fix = "use the pglockctl of the version installed"
	case len(s.Drift) > 0:
		changed := make([]string, len(s.Drift))
		for i, d := range s.Drift {
			changed[i] = d.String()
		}
		f.Severity, f.Detail = SeverityProblem, fmt.Sprintf("%d objects are not what version %d made: %s", len(s.Drift), s.Version, strings.Join(changed, "; "))
		f.Fix = "run `pglockctl migrate repair` for functions; restore tables, indexes and types by hand (`pglockctl migrate status` lists them)"
	case s.Version < s.Latest:
		f.Severity, f.Detail = SeverityWarning, fmt.Sprintf("version %d is installed; this pglockctl has %d (%d files pending)", s.Version, s.Latest, len(s.Pending))
		f.Fix = "run `pglockctl migrate up`"
	default:
		f.Severity, f.Detail = SeverityOK, fmt.Sprintf("version %d, every object as it made it", s.Version)
	}
	return f
}
