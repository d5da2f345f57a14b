package cron

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/ident"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/notify"
	"github.com/pglock/pglock/internal/observe"
)

// Func is a schedule's job. Its ctx ends when the run must stop: its lease was lost
// ([pglock.ErrLockLost]), a newer run replaced it ([pglock.ErrReplaced]), its timeout passed, or
// Stop gave up waiting ([pglock.ErrClosed]); context.Cause says which.
type Func func(ctx context.Context, run Run) error

// Scheduler runs this instance's schedules. Its methods are safe for concurrent use.
type Scheduler struct {
	events   *observe.Emitter // nil without an Observer
	pool     *pgxpool.Pool
	queries  *db.Queries
	cfg      Config
	instance string
	clock    clock.Clock // the host's clock, a seam for tests
	renewals *lease.Set  // the leases of running runs, renewed together (made at Start, on clock)

	mu       sync.Mutex
	entries  map[string]*entry // added in code, and the runtime schedules of the kinds handled
	handlers map[string]Func   // by kind
	// definitionsChanged says that the runtime schedules handled must be read again.
	definitionsChanged bool
	defs               definitions // the loop's
	started            bool
	stopped            bool
	active             map[int64]context.CancelCauseFunc // running runs, by id
	// replaced holds cancellations notified before their run started here (a claim's answer
	// can come after a newer run's notification); few, and cleared when it grows.
	replaced  map[int64]string
	seenEvery time.Duration // how often it records that it still has its schedules (a seam for tests)
	offset    offsetEstimate
	wake      chan struct{}
	stopLoop  context.CancelFunc
	// abortStatements cancels the loop's statements: once it has stopped, or when Stop's ctx
	// ends while a claim is under way.
	abortStatements context.CancelFunc
	loopDone        chan struct{}
	runsCtx         context.Context // every run's ctx derives from it
	endRuns         context.CancelCauseFunc
	runs            sync.WaitGroup
	unlisten        func()
	stopDone        chan struct{} // closed once the first Stop has returned
}

// entry is one schedule this instance runs. Its fields after revision are the loop's alone.
type entry struct {
	name, spec, zone string
	sched            schedule
	set              settings
	fn               Func
	kind             string          // a runtime schedule's; "" for one added in code
	args             json.RawMessage // a runtime schedule's
	revision         int64           // of a runtime schedule's definition
	definedAt        time.Time       // when a runtime schedule's definition was written

	registered bool
	watermark  time.Time // every tick up to it is accounted for, as last read
	failures   int       // registrations refused in a row
	retryAt    time.Time // on the host's clock: when to register again after a refusal
	finished   bool      // its run limit is reached
}

// kindOrNone is e's kind; "" for none or no entry.
func (e *entry) kindOrNone() string {
	if e == nil {
		return ""
	}
	return e.kind
}

// fire is when a tick of the entry fires: at its time plus its jitter, and not before its
// definition was written (an update that shortened the jitter of the tick in flight runs it
// now, not late).
func (e *entry) fire(at time.Time) time.Time {
	if fire := at.Add(jitterOf(e.name, at, e.set.jitter)); fire.After(e.definedAt) {
		return fire
	}
	return e.definedAt
}

// New returns a Scheduler that takes its connections from pool. A nil cfg means the defaults.
func New(pool *pgxpool.Pool, cfg *Config) (*Scheduler, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	instance, err := ident.Instance(c.AppName)
	if err != nil {
		return nil, errs.Errorf("%w: Config.AppName %w", pglock.ErrInvalidArgument, err)
	}
	return &Scheduler{
		events: observe.New(c.Observer, c.Logger),
		pool:   pool, queries: db.New(db.Translating(pool)), cfg: c, instance: instance, clock: clock.Real,
		entries: map[string]*entry{}, handlers: map[string]Func{}, defs: definitions{refused: map[string]int64{}},
		active: map[int64]context.CancelCauseFunc{}, replaced: map[int64]string{},
		wake: make(chan struct{}, 1), seenEvery: seenEvery,
	}, nil
}

// Add adds a schedule: name (1 to 255 bytes of UTF-8 without NUL, unique in this Scheduler
// and, across instances, naming the same job), spec (robfig/cron syntax: five fields, or six
// with seconds first; descriptors such as @hourly and @every 10s; an optional CRON_TZ= or TZ=
// prefix), and the job. A nil opts means the defaults. Bad input gets an error matching
// [pglock.ErrInvalidName], [pglock.ErrInvalidSpec], [pglock.ErrInvalidTTL] or
// [pglock.ErrInvalidArgument], and nothing is written; the name of a runtime schedule (Define),
// [pglock.ErrExists], here or from Start. The schedule is registered in the database at Start,
// or at once (in the background) once started.
func (s *Scheduler) Add(name, spec string, opts *Options, fn Func) error {
	if err := pglock.ValidateName(name); err != nil {
		return errs.Errorf("schedule name: %w", err)
	}
	if fn == nil {
		return errs.Errorf("%w: nil fn for schedule %q", pglock.ErrInvalidArgument, name)
	}
	sched, set, zone, err := compile(spec, opts)
	if err != nil {
		return errs.Errorf("schedule %q: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errs.Errorf("%w: the scheduler was stopped", pglock.ErrClosed)
	}
	if e, dup := s.entries[name]; dup {
		if e.kind != "" {
			return errs.Errorf("%w: schedule %q was defined at runtime: a schedule in code needs another name", pglock.ErrExists, name)
		}
		return errs.Errorf("%w: schedule %q was already added", pglock.ErrInvalidArgument, name)
	}
	s.entries[name] = &entry{name: name, spec: strings.TrimSpace(spec), zone: zone, sched: sched, set: set, fn: fn}
	s.wakeUp()
	return nil
}

// Remove stops this instance from firing the schedule; a run under way goes on. The schedule
// stays in the database (other instances may still have it; one that none has is shown as
// orphaned). It returns an error matching [pglock.ErrNotFound] if it was not added.
func (s *Scheduler) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.entries[name]; !ok || e.kind != "" {
		return errs.Errorf("%w: schedule %q was not added", pglock.ErrNotFound, name)
	}
	delete(s.entries, name)
	return nil
}

// Start registers the schedules added so far, measures the database clock's offset, and
// returns once scheduling runs in the background, until Stop. It fails if the database refuses
// a schedule; one added after Start is registered in the background, and retried on its own
// if refused.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	switch {
	case s.stopped:
		s.mu.Unlock()
		return errs.Errorf("%w: the scheduler was stopped", pglock.ErrClosed)
	case s.started:
		s.mu.Unlock()
		return errs.Errorf("%w: the scheduler was already started", pglock.ErrInvalidArgument)
	}
	s.started = true
	s.renewals = lease.NewSet(lease.SetConfig{Renew: s.renewMany, Ctx: context.Background(), Clock: s.clock})
	s.mu.Unlock()
	if err := s.measureOffset(ctx); err != nil {
		s.abandonStart()
		return err
	}
	for _, e := range s.snapshot() {
		if err := s.register(ctx, e); err != nil {
			s.abandonStart()
			return err
		}
	}
	s.mu.Lock()
	if s.stopped { // Stop came while Start registered
		s.mu.Unlock()
		return errs.Errorf("%w: the scheduler was stopped while it started", pglock.ErrClosed)
	}
	stopping, stopLoop := context.WithCancel(context.Background())
	statements, abortStatements := context.WithCancel(context.Background())
	s.runsCtx, s.endRuns = context.WithCancelCause(context.Background())
	s.stopLoop, s.abortStatements, s.loopDone = stopLoop, abortStatements, make(chan struct{})
	if !s.cfg.DisableNotifications {
		s.unlisten = notify.Subscribe(s.pool, s.cfg.ListenerConnConfig, s.cfg.Logger, db.CronChannel, notify.Handler{
			Notify: s.notified, Listening: s.wakeUp,
		})
	}
	s.mu.Unlock()
	go s.loop(stopping, statements)
	return nil
}

// abandonStart lets Start be called again after it failed.
func (s *Scheduler) abandonStart() {
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
}

// Stop stops firing (a claim under way completes, and what it claimed runs, unless ctx ends
// first: a claim cut short after it committed leaves its runs to be recorded abandoned), waits
// for running runs until ctx ends, then cancels them (the cause
// matches [pglock.ErrClosed]) and waits for them to return, and for their outcomes to be
// recorded (fn must honour its ctx); a canceled run that returns an error is recorded
// canceled, one that returns nil ran. The error is ctx's if runs had to be canceled. A Stop
// while another is under way waits for it as long as its own ctx allows.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped {
		done := s.stopDone
		s.mu.Unlock()
		select { // another Stop is under way: wait for it as long as ctx allows
		case <-done:
			return nil
		case <-ctx.Done():
			return errs.Errorf("stop: %w", ctx.Err())
		}
	}
	s.stopped = true
	s.stopDone = make(chan struct{})
	defer close(s.stopDone)
	started := s.loopDone != nil
	s.mu.Unlock()
	if !started {
		return nil
	}
	s.stopLoop()
	select {
	case <-s.loopDone:
	case <-ctx.Done(): // a claim under way takes too long: cut it short
	}
	s.abortStatements()
	<-s.loopDone
	if s.unlisten != nil {
		s.unlisten()
	}
	done := make(chan struct{})
	go func() { s.runs.Wait(); close(done) }()
	select {
	case <-done:
		s.endRuns(nil)
		return nil
	case <-ctx.Done():
		s.endRuns(errs.Errorf("%w: the scheduler stopped", pglock.ErrClosed))
		<-done
		return errs.Errorf("stop: running runs were canceled: %w", ctx.Err())
	}
}

// Stats is what a Scheduler reports about itself.
type Stats struct {
	// ClockOffset is the database's clock minus this host's, as last measured: the scheduler
	// fires on database time, so a host whose clock is off neither fires early nor late, but
	// operators should know.
	ClockOffset time.Duration
	// ClockUncertainty bounds the error of ClockOffset (half the measurement's round trip).
	ClockUncertainty time.Duration
	// OffsetMeasuredAt is when the offset was last measured, on this host's clock.
	OffsetMeasuredAt time.Time
	Schedules        int // added and not removed, and the runtime schedules of the kinds handled
	Running          int // runs under way in this instance
}

// Stats reports the clock offset and what runs.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		ClockOffset: s.offset.offset, ClockUncertainty: s.offset.uncertainty, OffsetMeasuredAt: s.offset.at,
		Schedules: len(s.entries), Running: len(s.active),
	}
}

// snapshot returns the entries now added.
func (s *Scheduler) snapshot() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		list = append(list, e)
	}
	return list
}

func (s *Scheduler) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// notified handles a notification on the cron channel: a run to cancel, or a change to claim.
func (s *Scheduler) notified(payload string) {
	var n struct {
		Op       string `json:"op"`
		Schedule string `json:"schedule"`
		Kind     string `json:"kind"` // define, update, delete: the runtime schedule's
		Run      int64  `json:"run"`
	}
	if err := json.Unmarshal([]byte(payload), &n); err != nil {
		s.cfg.Logger.Warn("pglock: cron: unreadable notification", "payload", payload, "error", err)
		return
	}
	if n.Op == "cancel" {
		s.cancelRun(n.Run, "")
		return
	}
	s.mu.Lock()
	_, mine := s.entries[n.Schedule]
	switch n.Op {
	case "define", "update", "delete":
		if mine || s.handlers[n.Kind] != nil {
			s.definitionsChanged, mine = true, true
		}
	}
	s.mu.Unlock()
	if mine {
		s.wakeUp()
	}
}

// cancelRun cancels a run of this instance that a newer run replaced, or remembers the
// cancellation for a run this instance may be about to start.
func (s *Scheduler) cancelRun(id int64, why string) {
	if why == "" {
		why = "a newer run of its schedule replaced it"
	}
	s.mu.Lock()
	cancel := s.active[id]
	if cancel == nil {
		if len(s.replaced) >= 1000 {
			clear(s.replaced)
		}
		s.replaced[id] = why
	}
	s.mu.Unlock()
	if cancel != nil {
		cancel(errs.Errorf("%w: %s", pglock.ErrReplaced, why))
	}
}

// register records the schedule in the database and reads its watermark.
func (s *Scheduler) register(ctx context.Context, e *entry) error {
	p := db.RegisterCronScheduleParams{
		Name: e.name, Spec: e.spec, TimeZone: e.zone, Overlap: string(e.set.overlap), CatchUp: string(e.set.catchUp),
		CatchUpWindowMs: e.set.window.Milliseconds(), KeepForMs: e.set.retention.Milliseconds(),
		KeepRuns: int32(e.set.maxRuns), Instance: s.instance,
	}
	p.JitterMs, p.StartsAt, p.EndsAt, p.RunLimit, p.PauseAfterFailures = e.set.extras()
	until, err := s.queries.RegisterCronSchedule(ctx, p)
	if err != nil {
		return errs.Errorf("register schedule %q: %w", e.name, err)
	}
	e.registered, e.watermark, e.finished = true, until, false // a claim tells it finished again
	return nil
}
