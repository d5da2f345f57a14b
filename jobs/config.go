package jobs

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
)

// The defaults of Config and Options.
const (
	DefaultTTL           = pglock.DefaultTTL
	DefaultWindow        = 7 * 24 * time.Hour // Kafka's default retention
	DefaultTxIdleTimeout = 30 * time.Second
)

// Limits of what a delivery may ask for.
const (
	MaxKeyLen   = 1024                  // bytes of a key
	MaxScopeLen = 255                   // characters of a scope
	MaxWindow   = 3650 * 24 * time.Hour // retention
	waiterTTL   = time.Minute           // a waiter's registration, renewed at every poll
	collectSize = 1000                  // records deleted per statement by Collect
	// cleanupTimeout bounds what a delivery does after its ctx may have ended: a rollback, a
	// failure recorded after one.
	cleanupTimeout = 5 * time.Second
)

// Config configures a Deduper. A nil *Config, and every zero field, means the default.
type Config struct {
	// AppName names this process in the instance recorded with each attempt, app@host:pid.
	// Default: the executable's base name.
	AppName string

	// Scope is the scope of Status and Forget, and of deliveries whose Options leave it empty.
	// Default: "" (a scope like any other).
	Scope string

	// TxIdleTimeout bounds, on the server, how long a RunTx transaction may stay idle (its
	// client silent between statements) before PostgreSQL ends its session: a worker that
	// vanishes mid-transaction (a frozen VM, a silent partition) leaves its key in progress no
	// longer than this, not for the hours TCP takes to notice. A stricter
	// idle_in_transaction_session_timeout already in force is kept. Default: DefaultTxIdleTimeout. Negative:
	// no bound (the server's setting applies).
	TxIdleTimeout time.Duration

	// DisableNotifications makes deliveries that wait (Options.Wait) poll instead of listening,
	// for a pool that cannot LISTEN (PgBouncer in transaction pooling mode) when
	// ListenerConnConfig cannot reach PostgreSQL directly either. Default: false.
	DisableNotifications bool

	// ListenerConnConfig, when set, is where the listener connects instead of where the pool
	// does (see tablelock.Config.ListenerConnConfig); it is shared with every other pglock
	// listener of the process on the same pool and config. Default: as the pool connects.
	ListenerConnConfig *pgx.ConnConfig

	// Logger receives the Deduper's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every delivery, run, lost lease and failed renewal
	// (pglock.Event, Primitive job), and Begin is called before each run of fn, whose context
	// it gives (a span's): without ever holding a delivery up. Default: none.
	Observer pglock.Observer
}

// Options configure one delivery. A nil *Options means the defaults.
type Options struct {
	// Scope namespaces the key: the same key in two scopes is two jobs. At most MaxScopeLen
	// characters of UTF-8 without NUL. Default: Config.Scope.
	Scope string

	// Window is how long the record is kept after its outcome (and after each claim), so that
	// a delivery within it is recognised as a duplicate; after it, the key may run again. Up to
	// MaxWindow. Default: DefaultWindow.
	Window time.Duration

	// MaxAttempts is how many claims a key may have before deliveries give up on it
	// (pglock.ErrGaveUp); a crashed attempt counts. Default: 0, no limit.
	MaxAttempts int

	// TTL is the lease of a Run or Do attempt, renewed every third of it; the attempt is lost
	// (fn's context canceled) a tenth of it before it could expire on the database, when
	// renewals stop getting through. From 100 ms to 24 h. Default: DefaultTTL. RunTx
	// has no lease: Config.TxIdleTimeout bounds it instead.
	TTL time.Duration

	// Fingerprint identifies the payload (say, a hash of it). A key delivered again with a
	// different fingerprint than the record's gets an error matching
	// pglock.ErrFingerprintMismatch, and nothing runs. UTF-8 without NUL. Default: none, which
	// matches any.
	Fingerprint string

	// Wait makes a delivery of a key running elsewhere wait for that attempt's outcome (woken
	// by a notification, bounded by ctx) instead of returning OutcomeInProgress: OutcomeAlreadyDone if it
	// succeeded; if it failed, or its runner vanished, this delivery claims and runs it.
	// Default: false.
	Wait bool

	// Mode says when a key that ran may run again: OncePerWindow (the default), WhileRunning,
	// PerPeriod(d) or Supersede.
	Mode Mode
}

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.TxIdleTimeout == 0 {
		cfg.TxIdleTimeout = DefaultTxIdleTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// validate checks a Config after withDefaults, with errors matching [pglock.ErrInvalidArgument].
func (c *Config) validate() error {
	if err := checkScope(c.Scope); err != nil {
		return errs.Errorf("%w: Config.Scope %w", pglock.ErrInvalidArgument, err)
	}
	if c.TxIdleTimeout > 0 && (c.TxIdleTimeout < time.Millisecond || c.TxIdleTimeout.Milliseconds() > 1<<31-1) {
		return errs.Errorf("%w: Config.TxIdleTimeout (%s) must be from 1 ms to %d ms", pglock.ErrInvalidArgument,
			c.TxIdleTimeout, 1<<31-1)
	}
	return nil
}

// request is one delivery's arguments, checked.
type request struct {
	scope, key  string
	fingerprint *string
	window      time.Duration
	maxAttempts int32
	timing      lease.Timing // Run's lease
	wait        bool
	mode        Mode
}

// withDefaults fills the zero fields of o (nil for none) with the defaults, Config's among them.
func (o *Options) withDefaults(cfg Config) Options {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.Scope == "" {
		opts.Scope = cfg.Scope
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	return opts
}

// newRequest checks key and opts (after withDefaults), with errors matching
// [pglock.ErrInvalidArgument].
func (d *Deduper) newRequest(key string, o *Options) (request, error) {
	opts := o.withDefaults(d.cfg)
	invalid := func(format string, args ...any) (request, error) {
		return request{}, errs.Errorf("%w: %s", pglock.ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	if err := checkKey(key); err != nil {
		return request{}, err
	}
	if err := checkScope(opts.Scope); err != nil {
		return invalid("Options.Scope %v", err)
	}
	if opts.Window < time.Millisecond || opts.Window > MaxWindow {
		return invalid("Options.Window (%s) must be from 1 ms to %s", opts.Window, MaxWindow)
	}
	if opts.MaxAttempts < 0 || opts.MaxAttempts > 1<<31-1 {
		return invalid("Options.MaxAttempts (%d) must be 0 (no limit) or more", opts.MaxAttempts)
	}
	if err := opts.Mode.check(opts); err != nil {
		return request{}, err
	}
	if opts.Mode.period > opts.Window {
		opts.Window = opts.Mode.period // the record outlives its period
	}
	timing, err := lease.NewTiming(opts.TTL, 0, 0)
	if err != nil {
		return request{}, errs.Errorf("Options.TTL: %w", err)
	}
	var fingerprint *string
	if opts.Fingerprint != "" {
		if !utf8.ValidString(opts.Fingerprint) || strings.IndexByte(opts.Fingerprint, 0) >= 0 {
			return invalid("Options.Fingerprint must be UTF-8 without NUL")
		}
		fingerprint = &opts.Fingerprint
	}
	return request{
		scope: opts.Scope, key: key, fingerprint: fingerprint, window: opts.Window,
		maxAttempts: int32(opts.MaxAttempts), timing: timing, wait: opts.Wait, mode: opts.Mode,
	}, nil
}

// periodMs is PerPeriod's period for the claim, nil in the other modes.
func (r request) periodMs() *int64 {
	if r.mode.period == 0 {
		return nil
	}
	ms := r.mode.period.Milliseconds()
	return &ms
}

// uniqueness names the delivery's mode in its events.
func (r request) uniqueness() string { return r.mode.name }

// checkKey refuses what cannot be a job key, with an error matching [pglock.ErrInvalidArgument].
func checkKey(key string) error {
	var problem string
	switch {
	case key == "":
		problem = "empty job key"
	case len(key) > MaxKeyLen:
		problem = fmt.Sprintf("job key of %d bytes, the limit is %d, starting %.40q", len(key), MaxKeyLen, key)
	case !utf8.ValidString(key):
		problem = fmt.Sprintf("job key is not valid UTF-8: %.40q", key)
	case strings.IndexByte(key, 0) >= 0:
		problem = fmt.Sprintf("job key contains a NUL byte: %.40q", key)
	default:
		return nil
	}
	return errs.Errorf("%w: %s", pglock.ErrInvalidArgument, problem)
}

func checkScope(scope string) error {
	switch {
	case utf8.RuneCountInString(scope) > MaxScopeLen:
		return fmt.Errorf("is over %d characters: %.40q", MaxScopeLen, scope)
	case !utf8.ValidString(scope) || strings.IndexByte(scope, 0) >= 0:
		return fmt.Errorf("must be UTF-8 without NUL: %.40q", scope)
	}
	return nil
}

// label names the job in errors and logs.
func (r request) label() string {
	if r.scope == "" {
		return fmt.Sprintf("%.80q", r.key)
	}
	return fmt.Sprintf("%.80q in scope %q", r.key, r.scope)
}
