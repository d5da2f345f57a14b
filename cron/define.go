package cron

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
)

// MaxArgs is the largest a runtime schedule's arguments may be, in bytes of JSON.
const MaxArgs = 64 << 10

// Definition is a schedule kept in the database: defined, updated and deleted at runtime
// (Define, Update, Delete; pglockctl cron create, update, delete; the console), and run by the
// instances whose Scheduler handles its Kind, each tick once, as a schedule added in code is.
type Definition struct {
	Name string // as Add's: 1 to 255 bytes of UTF-8 without NUL, unique among all schedules
	Kind string // the handler that runs it: Scheduler.Handle(Kind, fn); a name as Name is
	Spec string // as Add's, with its extension L (the last day of the month)
	// Args are given to each run (Run.Args): JSON of at most MaxArgs bytes; nil for none.
	Args json.RawMessage
	// Options are as Add's; Location names the zone a spec without CRON_TZ= is read in. nil
	// means the defaults.
	Options *Options
}

// Change says who changes a runtime schedule and why: pglock_cron_changes keeps it, with the
// definition that resulted.
type Change struct {
	By, Note string
	// DryRun checks everything, what the database would refuse included, and writes nothing.
	DryRun bool
}

// Define creates a runtime schedule. Its first tick is the first after now (or after its
// Start). Bad input gets an error matching [pglock.ErrInvalidName], [pglock.ErrInvalidSpec],
// [pglock.ErrInvalidTTL] or [pglock.ErrInvalidArgument]; a name that is taken, by a runtime
// schedule or one in code, [pglock.ErrExists]; and nothing is written. A kind that no instance
// handles is allowed: the schedule is shown unhandled until one does.
func Define(ctx context.Context, pool *pgxpool.Pool, def Definition, change *Change) error {
	return define(ctx, pool, def, change, false)
}

// Update replaces a runtime schedule's definition. A new spec or zone takes effect from now:
// no tick of the old spec starts once the update has committed. Another change keeps the
// ticks: the tick in flight (one whose jitter has not yet come) runs once, as the new
// definition says. Errors are Define's, [pglock.ErrNotFound] for no such schedule and
// [pglock.ErrDefinedInCode] for a schedule added in code.
func Update(ctx context.Context, pool *pgxpool.Pool, def Definition, change *Change) error {
	return define(ctx, pool, def, change, true)
}

func define(ctx context.Context, pool *pgxpool.Pool, def Definition, change *Change, replace bool) error {
	p, err := def.params(change, replace)
	if err != nil {
		return err
	}
	op := "define"
	if replace {
		op = "update"
	}
	err = withQueries(ctx, pool, change != nil && change.DryRun, func(q *db.Queries) error {
		_, err := q.DefineCronSchedule(ctx, p)
		return err
	})
	if err != nil {
		return errs.Errorf("%s %q: %w", op, def.Name, err)
	}
	return nil
}

// Delete deletes a runtime schedule and its history: no tick of it starts once the delete has
// committed, and a run under way loses its lease (its ctx ends, [pglock.ErrLockLost]). Errors
// match [pglock.ErrNotFound] for no such schedule and [pglock.ErrDefinedInCode] for one added in
// code.
func Delete(ctx context.Context, pool *pgxpool.Pool, name string, change *Change) error {
	var c Change
	if change != nil {
		c = *change
	}
	err := withQueries(ctx, pool, change != nil && change.DryRun, func(q *db.Queries) error {
		return q.DeleteCronSchedule(ctx, db.DeleteCronScheduleParams{Name: name, ChangedBy: &c.By, Note: &c.Note})
	})
	if err != nil {
		return errs.Errorf("delete %q: %w", name, notFound(err))
	}
	return nil
}

// withQueries runs fn on pool, or, for a dry run (a preview), in a transaction it rolls back.
func withQueries(ctx context.Context, pool *pgxpool.Pool, dryRun bool, fn func(q *db.Queries) error) error {
	q, err := queries(pool)
	switch {
	case err != nil:
		return err
	case !dryRun:
		return fn(q)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return db.Translate(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	return fn(db.New(db.Translating(tx)))
}

// params checks the definition as its instances will read it, and returns the query's
// arguments.
func (def Definition) params(change *Change, replace bool) (db.DefineCronScheduleParams, error) {
	if err := pglock.ValidateName(def.Name); err != nil {
		return db.DefineCronScheduleParams{}, errs.Errorf("schedule name: %w", err)
	}
	if err := pglock.ValidateName(def.Kind); err != nil {
		return db.DefineCronScheduleParams{}, errs.Errorf("schedule %q: kind: %w", def.Name, err)
	}
	_, set, zone, err := compile(def.Spec, def.Options)
	if err != nil {
		return db.DefineCronScheduleParams{}, errs.Errorf("schedule %q: %w", def.Name, err)
	}
	var args []byte
	if len(def.Args) > 0 {
		switch {
		case len(def.Args) > MaxArgs:
			return db.DefineCronScheduleParams{}, errs.Errorf("%w: schedule %q: Args: %d bytes, the limit is %d",
				pglock.ErrInvalidArgument, def.Name, len(def.Args), MaxArgs)
		case !json.Valid(def.Args):
			return db.DefineCronScheduleParams{}, errs.Errorf("%w: schedule %q: Args are not JSON", pglock.ErrInvalidArgument, def.Name)
		case ident.HoldsNUL(def.Args):
			return db.DefineCronScheduleParams{}, errs.Errorf("%w: schedule %q: Args hold \\u0000, which PostgreSQL's jsonb refuses",
				pglock.ErrInvalidArgument, def.Name)
		}
		args = def.Args
	}
	var c Change
	if change != nil {
		c = *change
	}
	p := db.DefineCronScheduleParams{
		Name: def.Name, Kind: def.Kind, Spec: def.Spec, TimeZone: zone, Args: args,
		Overlap: string(set.overlap), CatchUp: string(set.catchUp), CatchUpWindowMs: set.window.Milliseconds(),
		KeepForMs: set.retention.Milliseconds(), KeepRuns: int32(set.maxRuns), TtlMs: set.timing.TTL.Milliseconds(),
		TimeoutMs: set.timeout.Milliseconds(), Replace: replace, ChangedBy: &c.By, Note: &c.Note,
	}
	p.JitterMs, p.StartsAt, p.EndsAt, p.RunLimit, p.PauseAfterFailures = set.extras()
	return p, nil
}

// extras are the settings' spec extras as the database keeps them.
func (set settings) extras() (jitterMs int64, startsAt, endsAt *time.Time, runLimit, pauseAfter *int32) {
	optional := func(n int) *int32 {
		if n == 0 {
			return nil
		}
		v := int32(n)
		return &v
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	return set.jitter.Milliseconds(), at(set.start), at(set.end), optional(set.runLimit), optional(set.pauseAfter)
}

// optionsOf reads a schedule's options as its row keeps them; a runtime schedule's Timeout and
// TTL too (a schedule in code keeps those in its code).
func optionsOf(r db.PglockCronSchedule) (*Options, error) {
	loc, err := time.LoadLocation(r.TimeZone)
	if err != nil {
		return nil, errs.Errorf("%w: time zone %q: %w", pglock.ErrInvalidSpec, r.TimeZone, err)
	}
	opts := &Options{
		Location: loc, Overlap: Overlap(r.Overlap), CatchUp: CatchUp(r.CatchUp),
		CatchUpWindow: time.Duration(r.CatchUpWindowMs) * time.Millisecond,
		Retention:     time.Duration(r.KeepForMs) * time.Millisecond, MaxRuns: int(r.KeepRuns),
		Jitter: time.Duration(r.JitterMs) * time.Millisecond, Start: db.Deref(r.StartsAt), End: db.Deref(r.EndsAt),
		RunLimit: int(db.Deref(r.RunLimit)), PauseAfterFailures: int(db.Deref(r.PauseAfterFailures)),
		TTL: time.Duration(db.Deref(r.TtlMs)) * time.Millisecond, Timeout: time.Duration(db.Deref(r.TimeoutMs)) * time.Millisecond,
	}
	return opts, nil
}

// Handle makes this instance run the runtime schedules of kind with fn (Define): it reads them
// as soon as it is started, and learns of those defined, updated or deleted later at once by
// notification, or within a poll interval. An instance runs only the kinds it handles; a schedule whose kind no
// instance handles is shown unhandled, and its ticks are accounted for by its catch-up policy
// once one does. Errors match [pglock.ErrInvalidName] for a bad kind, [pglock.ErrInvalidArgument]
// for a nil fn or a kind handled already, [pglock.ErrClosed] after Stop.
func (s *Scheduler) Handle(kind string, fn Func) error {
	if err := pglock.ValidateName(kind); err != nil {
		return errs.Errorf("kind: %w", err)
	}
	if fn == nil {
		return errs.Errorf("%w: nil fn for kind %q", pglock.ErrInvalidArgument, kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.stopped:
		return errs.Errorf("%w: the scheduler was stopped", pglock.ErrClosed)
	case s.handlers[kind] != nil:
		return errs.Errorf("%w: kind %q is handled already", pglock.ErrInvalidArgument, kind)
	}
	s.handlers[kind] = fn
	s.definitionsChanged = true
	s.wakeUp()
	return nil
}

// definitions is what the loop knows of the runtime schedules it handles.
type definitions struct {
	checkedAt time.Time                    // on the host's clock
	version   db.CronDefinitionsVersionRow // as last read
	refused   map[string]int64             // revisions that cannot run here, logged once each
}

// syncDefinitions reads the runtime schedules of the kinds handled, when one changed or a poll
// interval has passed, and makes this instance's entries of them match. It answers whether
// it read one anew (to record promptly that they are handled: a change of kind clears that).
func (s *Scheduler) syncDefinitions(ctx context.Context, now time.Time) (renewed bool, err error) {
	s.mu.Lock()
	kinds := make([]string, 0, len(s.handlers))
	for kind := range s.handlers {
		kinds = append(kinds, kind)
	}
	changed := s.definitionsChanged
	s.definitionsChanged = false
	s.mu.Unlock()
	if len(kinds) == 0 || !changed && now.Sub(s.defs.checkedAt) < s.cfg.PollInterval {
		return false, nil
	}
	defer func() {
		if err != nil { // read them again next time
			s.mu.Lock()
			s.definitionsChanged = true
			s.mu.Unlock()
		}
	}()
	version, err := s.queries.CronDefinitionsVersion(ctx, kinds)
	if err != nil {
		return false, errs.Errorf("read the version of runtime schedules: %w", err)
	}
	s.defs.checkedAt = now
	if !changed && version == s.defs.version {
		return false, nil
	}
	rows, err := s.queries.CronDefinitions(ctx, kinds)
	if err != nil {
		return false, errs.Errorf("read runtime schedules: %w", err)
	}
	s.defs.version = version // read before the rows: a change in between is read next time
	s.mu.Lock()
	defer s.mu.Unlock()
	present := make(map[string]bool, len(rows))
	for _, r := range rows {
		present[r.Name] = true
		old := s.entries[r.Name]
		switch {
		case old != nil && old.kind == "":
			continue // added in code here: the database refuses to have both, so it was just deleted
		case old != nil && old.registered && old.revision == r.Revision:
			continue
		}
		e, err := definitionEntry(r, s.handlers[db.Deref(r.Kind)])
		if err != nil {
			delete(s.entries, r.Name)
			if s.defs.refused[r.Name] != r.Revision {
				s.defs.refused[r.Name] = r.Revision
				s.cfg.Logger.Error("pglock: cron: a runtime schedule cannot run on this instance", "schedule", r.Name,
					"revision", r.Revision, "error", err)
			}
			continue
		}
		s.entries[r.Name] = e
		renewed = true
	}
	for name, e := range s.entries {
		if e.kind != "" && !present[name] {
			delete(s.entries, name)
		}
	}
	return renewed, nil
}

// definitionEntry is the entry of a runtime schedule's row, run by fn.
func definitionEntry(r db.PglockCronSchedule, fn Func) (*entry, error) {
	opts, err := optionsOf(r)
	if err != nil {
		return nil, err
	}
	sched, set, zone, err := compile(r.Spec, opts)
	if err != nil {
		return nil, err
	}
	return &entry{
		name: r.Name, spec: r.Spec, zone: zone, sched: sched, set: set, fn: fn,
		kind: db.Deref(r.Kind), args: r.Args, revision: r.Revision, definedAt: db.Deref(r.DefinedAt),
		registered: true, watermark: r.AccountedUntil, finished: r.RunLimit != nil && r.RunsStarted >= int64(*r.RunLimit),
	}, nil
}
