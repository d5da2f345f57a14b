package cron

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
)

// Config configures a Scheduler. A nil *Config, and every zero field, means the default.
type Config struct {
	// AppName names this process in the instance recorded with each run, app@host:pid.
	// Default: the executable's base name.
	AppName string

	// PollInterval is the longest the scheduler goes without claiming, even with no tick due:
	// a claim records runs abandoned by vanished instances and starts pending runs (manual,
	// backfilled, buffered) whose notification was lost. It is shortened to the heartbeat of
	// the shortest run lease, so that an abandoned run is recorded within its TTL plus a
	// heartbeat. Default: DefaultPollInterval.
	PollInterval time.Duration

	// DisableNotifications makes the scheduler rely on polling alone, for a pool that cannot
	// LISTEN when ListenerConnConfig cannot reach PostgreSQL directly either. Default: false.
	DisableNotifications bool

	// ListenerConnConfig, when set, is where the listener connects instead of where the pool
	// does (see tablelock.Config.ListenerConnConfig); it is shared with every other pglock
	// listener of the process on the same pool and config. Default: as the pool connects.
	ListenerConnConfig *pgx.ConnConfig

	// Logger receives the scheduler's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every run this instance starts, ends or records as missed
	// (pglock.Event, Primitive cron: a missed tick is told by the one instance that records
	// it), of lost leases and of the clock offset; Begin is called before each run, and gives
	// its context (a root span's). Default: none.
	Observer pglock.Observer
}

// Overlap says what happens to a tick that comes while a run of its schedule is running
// (on any instance).
type Overlap string

const (
	OverlapSkip      Overlap = "skip"       // the tick is recorded skipped (the default)
	OverlapBufferOne Overlap = "buffer_one" // the tick runs once the running run ends; at most one waits
	OverlapAllow     Overlap = "allow"      // the tick runs at once, beside the running one
	OverlapReplace   Overlap = "replace"    // the running run is canceled (ErrReplaced) and the tick runs
)

// CatchUp says what happens to ticks missed while no instance ran the schedule.
type CatchUp string

const (
	CatchUpSkip   CatchUp = "skip"   // every missed tick is recorded missed (the default)
	CatchUpLatest CatchUp = "latest" // the latest missed tick in the window runs once; the others are recorded missed
	CatchUpAll    CatchUp = "all"    // each missed tick in the window runs, oldest first (at most MaxCatchUp)
)

// The defaults of Config and Options.
const (
	DefaultPollInterval  = 2 * time.Second
	DefaultOverlap       = OverlapSkip
	DefaultCatchUp       = CatchUpSkip
	DefaultCatchUpWindow = 24 * time.Hour
	DefaultTTL           = pglock.DefaultTTL
	DefaultRetention     = 7 * 24 * time.Hour
	DefaultMaxRuns       = 1000
)

// Limits.
const (
	MaxCatchUp   = 100              // missed ticks a CatchUpAll schedule runs at once; older ones are recorded missed
	OnTimeLimit  = time.Minute      // a tick found later than this after its time is missed
	seenEvery    = 30 * time.Second // how often an instance records that it still has its schedules
	collectEvery = time.Minute      // how often an instance applies run retention
	offsetEvery  = 30 * time.Second // how often the database clock offset is measured again
)

// Options configure one schedule. A nil *Options means the defaults.
type Options struct {
	// Location is where a spec without a CRON_TZ= or TZ= prefix is read. Every instance must
	// read it the same way, so the default is UTC, not the host's zone.
	Location *time.Location

	// Overlap is the overlap policy. Default: DefaultOverlap (OverlapSkip).
	Overlap Overlap

	// CatchUp is the catch-up policy. Default: DefaultCatchUp (CatchUpSkip).
	CatchUp CatchUp

	// CatchUpWindow is how old a missed tick may be and still run under CatchUpLatest or
	// CatchUpAll. Default: DefaultCatchUpWindow.
	CatchUpWindow time.Duration

	// Timeout bounds a run: its context ends then (context.DeadlineExceeded) and the run is
	// recorded failed if fn returns an error. Default: 0, no bound.
	Timeout time.Duration

	// TTL is a run's lease, renewed every third of it. A run whose lease cannot be renewed has
	// its context canceled (pglock.ErrLockLost) a tenth of it before the lease could expire on
	// the database; a run whose instance vanished is recorded abandoned within the TTL plus a
	// heartbeat. From 100 ms to 24 h. Default: DefaultTTL.
	TTL time.Duration

	// Retention is how long run history is kept, from when a run finished or was recorded.
	// Default: DefaultRetention.
	Retention time.Duration

	// MaxRuns is how many runs of history are kept at most (up to 2³¹−1). Default: DefaultMaxRuns.
	MaxRuns int

	// Jitter spreads the schedule's runs: each tick fires at an offset in [0, Jitter) after its
	// time, computed from the schedule's name and the tick, so every instance agrees; the tick
	// keeps its time in the history (Run.ScheduledTime). It must be shorter than the shortest
	// interval between ticks. Default: 0, none.
	Jitter time.Duration

	// Start and End bound the schedule: a tick before Start or after End is not one of its
	// ticks. Default: zero times, no bound.
	Start, End time.Time

	// RunLimit is how many runs of its ticks the schedule makes; it is then finished: its
	// ticks no longer run, and it stays, with its history, until deleted or removed. Manual runs
	// do not count. Default: 0, no limit.
	RunLimit int

	// PauseAfterFailures pauses the schedule (Pause, with a note saying why) once this many of
	// its runs in a row have failed; Resume clears the count. Default: 0, never.
	PauseAfterFailures int
}

// settings are a schedule's Options, checked and with defaults.
type settings struct {
	overlap    Overlap
	catchUp    CatchUp
	window     time.Duration
	timeout    time.Duration
	timing     lease.Timing
	retention  time.Duration
	maxRuns    int
	jitter     time.Duration
	start, end time.Time
	runLimit   int
	pauseAfter int
}

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// validate checks a Config after withDefaults, with errors matching [pglock.ErrInvalidArgument].
func (c *Config) validate() error {
	if c.PollInterval < 10*time.Millisecond {
		return errs.Errorf("%w: Config.PollInterval (%s) must be at least 10ms", pglock.ErrInvalidArgument, c.PollInterval)
	}
	return nil
}

// withDefaults fills the zero fields of o (nil for none) with the defaults.
func (o *Options) withDefaults() Options {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	if opts.Overlap == "" {
		opts.Overlap = DefaultOverlap
	}
	if opts.CatchUp == "" {
		opts.CatchUp = DefaultCatchUp
	}
	if opts.CatchUpWindow == 0 {
		opts.CatchUpWindow = DefaultCatchUpWindow
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxRuns == 0 {
		opts.MaxRuns = DefaultMaxRuns
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	return opts
}

// settings checks o (after withDefaults), with errors matching [pglock.ErrInvalidArgument], and
// returns what the scheduler keeps of it.
func (o *Options) settings() (settings, *time.Location, error) {
	opts := o.withDefaults()
	invalid := func(format string, args ...any) (settings, *time.Location, error) {
		return settings{}, nil, errs.Errorf("%w: %s", pglock.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	loc := opts.Location
	switch name := loc.String(); {
	case loc == time.Local || name == "Local":
		return invalid("Options.Location: time.Local differs from host to host; name the zone (time.LoadLocation)")
	case name == "":
		return invalid("Options.Location has no name; every instance must load the same zone by name (time.LoadLocation)")
	default:
		if _, err := time.LoadLocation(name); err != nil {
			return invalid("Options.Location %q cannot be loaded by its name (time.LoadLocation), as every instance must", name)
		}
	}
	switch opts.Overlap {
	case OverlapSkip, OverlapBufferOne, OverlapAllow, OverlapReplace:
	default:
		return invalid("Options.Overlap %q is not one of the Overlap constants", opts.Overlap)
	}
	switch opts.CatchUp {
	case CatchUpSkip, CatchUpLatest, CatchUpAll:
	default:
		return invalid("Options.CatchUp %q is not one of the CatchUp constants", opts.CatchUp)
	}
	if opts.CatchUpWindow < time.Millisecond {
		return invalid("Options.CatchUpWindow (%s) must be at least 1ms", opts.CatchUpWindow)
	}
	if opts.Retention < time.Millisecond {
		return invalid("Options.Retention (%s) must be at least 1ms", opts.Retention)
	}
	if opts.Timeout < 0 {
		return invalid("Options.Timeout (%s) must not be negative", opts.Timeout)
	}
	if opts.MaxRuns < 0 || opts.MaxRuns > 1<<31-1 {
		return invalid("Options.MaxRuns (%d) must be from 1 to %d", opts.MaxRuns, 1<<31-1)
	}
	if opts.Jitter < 0 {
		return invalid("Options.Jitter (%s) must not be negative", opts.Jitter)
	}
	if !opts.Start.IsZero() && !opts.End.IsZero() && !opts.End.After(opts.Start) {
		return invalid("Options.End (%s) must be after Options.Start (%s)", opts.End, opts.Start)
	}
	if opts.RunLimit < 0 || opts.RunLimit > 1<<31-1 {
		return invalid("Options.RunLimit (%d) must be from 0 (no limit) to %d", opts.RunLimit, 1<<31-1)
	}
	if opts.PauseAfterFailures < 0 || opts.PauseAfterFailures > 1<<31-1 {
		return invalid("Options.PauseAfterFailures (%d) must be from 0 (never) to %d", opts.PauseAfterFailures, 1<<31-1)
	}
	timing, err := lease.NewTiming(opts.TTL, 0, 0)
	if err != nil {
		return settings{}, nil, errs.Errorf("Options.TTL: %w", err)
	}
	return settings{overlap: opts.Overlap, catchUp: opts.CatchUp, window: opts.CatchUpWindow, timeout: opts.Timeout,
		timing: timing, retention: opts.Retention, maxRuns: opts.MaxRuns, jitter: opts.Jitter,
		start: opts.Start, end: opts.End, runLimit: opts.RunLimit, pauseAfter: opts.PauseAfterFailures}, loc, nil
}

// compile checks a schedule's spec and options together, and returns what the scheduler keeps
// of them: the schedule within its bounds, its settings and its zone's name.
func compile(spec string, opts *Options) (schedule, settings, string, error) {
	set, loc, err := opts.settings()
	if err != nil {
		return nil, settings{}, "", err
	}
	sched, zone, err := parseSpec(spec, loc)
	if err != nil {
		return nil, settings{}, "", err
	}
	if set.jitter > 0 {
		from := set.start
		if from.IsZero() {
			from = time.Now()
		}
		if gap := shortestGap(sched, from); gap > 0 && set.jitter >= gap {
			return nil, settings{}, "", errs.Errorf("%w: Options.Jitter (%s) must be shorter than the shortest interval between ticks (%s)",
				pglock.ErrInvalidArgument, set.jitter, gap)
		}
	}
	return set.bound(sched), set, zone, nil
}

// bound returns s within the settings' Start and End.
func (set settings) bound(s schedule) schedule {
	if set.start.IsZero() && set.end.IsZero() {
		return s
	}
	return boundedSchedule{inner: s, start: set.start, end: set.end}
}

// RunKind says why a run started.
type RunKind string

const (
	RunKindScheduled RunKind = "scheduled" // its tick came (or, buffered, its turn after the previous run)
	RunKindCatchUp   RunKind = "catch_up"  // a tick missed while no instance ran the schedule
	RunKindManual    RunKind = "manual"    // triggered by hand (Trigger, pglockctl cron trigger)
	RunKindBackfill  RunKind = "backfill"  // a past tick queued by Backfill
)

// Run is what fn learns about the run it makes.
type Run struct {
	Schedule      string
	ScheduledTime time.Time // the tick, by the database's clock (for a manual run: when it was asked for)
	Kind          RunKind   // RunKindManual: triggered by hand
	Attempt       int       // runs of this tick started so far, this one included
	Token         int64     // fencing token: larger than every earlier run's, of any schedule
	// Args are a runtime schedule's arguments (Definition.Args), as its definition had them when
	// the run was claimed; nil for a schedule added in code.
	Args json.RawMessage
}
