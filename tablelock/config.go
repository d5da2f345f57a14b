package tablelock

import (
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/lease"
)

// The TTLs a lock may have, and the defaults of Config.
const (
	MinTTL = lease.MinTTL
	MaxTTL = lease.MaxTTL

	DefaultTTL             = pglock.DefaultTTL
	DefaultMaxPollInterval = time.Second
)

// Config configures a Locker. A nil *Config, and every zero field, means the default.
type Config struct {
	// AppName names this process in the instance recorded with each lock, app@host:pid.
	// Default: the executable's base name.
	AppName string

	// TTL is the lease of a lock acquired without AcquireOptions.TTL. Default: DefaultTTL.
	TTL time.Duration

	// HeartbeatInterval is how often a held lock is renewed. Default: a third of its TTL.
	// Negative: never; the lock is then lost at its TTL less the safety margin unless Extend
	// is called. New refuses one under a millisecond, or one that could not renew a lock of
	// Config.TTL before its safety margin; a lock acquired with a TTL too short for it is
	// renewed every third of that TTL.
	HeartbeatInterval time.Duration

	// SafetyMargin is how long before the database could give a lock away its holder declares
	// it lost. Default: a tenth of the lock's TTL. It must leave more than a third of
	// Config.TTL before it (New refuses it otherwise), and of any TTL a lock is acquired or
	// extended with (pglock.ErrInvalidTTL otherwise): room for a heartbeat.
	SafetyMargin time.Duration

	// DisableNotifications makes waiters poll instead of listening, for a pool that cannot
	// LISTEN (PgBouncer in transaction pooling mode) when ListenerConnConfig cannot reach
	// PostgreSQL directly either. Default: false.
	DisableNotifications bool

	// ListenerConnConfig, when set, is where the Locker's listener connects instead of where
	// the pool does: directly to PostgreSQL when the pool goes through PgBouncer in
	// transaction pooling mode, where LISTEN cannot work. The listener is shared by every
	// Locker (and scheduler, elector) of the process on the pool with the same
	// ListenerConnConfig. Default: connect as the pool does, through its BeforeConnect and
	// AfterConnect.
	ListenerConnConfig *pgx.ConnConfig

	// MaxPollInterval caps the backoff of the first waiter of a name between polls, without
	// notifications (DisableNotifications): backed off, it polls about that often and never
	// more often (at most one query per interval, and per third of its TTL when that is
	// shorter). A listening waiter does not poll on its own: its place is kept with every other
	// waiter's in one statement per tick. Default: DefaultMaxPollInterval.
	MaxPollInterval time.Duration

	// Logger receives the Locker's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every acquisition, release, loss, failed renewal and
	// refused fence (pglock.Event, Primitive lock or semaphore), without ever holding them up.
	// Default: none.
	Observer pglock.Observer
}

// AcquireOptions configure one acquisition. A nil *AcquireOptions means the defaults.
type AcquireOptions struct {
	// TTL is the lease, from MinTTL to MaxTTL, in whole milliseconds. Default: Config.TTL.
	TTL time.Duration

	// Metadata is stored with the lock, shown to operators and to contenders in LockedError.
	// It must encode as JSON that jsonb takes (no NUL characters). Default: none.
	Metadata map[string]any

	// WaitTimeout bounds how long Acquire and WithLock wait; the error then matches
	// pglock.ErrLockTimeout, and pglock.ErrLocked (a *LockedError naming the holder, once a
	// poll has seen one). Default: no bound but the context's, whose deadline gives an error
	// matching pglock.ErrLockTimeout too.
	WaitTimeout time.Duration
}

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.MaxPollInterval == 0 {
		cfg.MaxPollInterval = DefaultMaxPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// validate checks a Config after withDefaults: every mistake is found here, as an error matching
// [pglock.ErrInvalidArgument] that names the field, so that no acquisition fails later for one.
func (c *Config) validate() error {
	invalid := func(field, format string, args ...any) error {
		return errs.Errorf("%w: Config."+field+" "+format, append([]any{pglock.ErrInvalidArgument}, args...)...)
	}
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return invalid("TTL", "(%s) is outside [%s, %s]", c.TTL, MinTTL, MaxTTL)
	}
	if c.SafetyMargin < 0 {
		return invalid("SafetyMargin", "is negative")
	}
	if c.MaxPollInterval < 0 {
		return invalid("MaxPollInterval", "is negative")
	}
	if c.HeartbeatInterval > 0 && c.HeartbeatInterval < time.Millisecond {
		return invalid("HeartbeatInterval", "(%s) is under a millisecond: renewals back to back", c.HeartbeatInterval)
	}
	// Config.TTL must be kept as configured: the rules for any TTL (timing), applied to it,
	// with none of timing's fallbacks.
	t, err := c.timing(c.TTL)
	if err != nil {
		return invalid("SafetyMargin", "(%s) leaves no room for a heartbeat in Config.TTL: %w", c.SafetyMargin, err)
	}
	if c.HeartbeatInterval > 0 && c.HeartbeatInterval != t.Heartbeat {
		return invalid("HeartbeatInterval", "(%s) could not renew a lock of Config.TTL (%s) before its safety margin (%s)",
			c.HeartbeatInterval, t.TTL, t.Margin)
	}
	return nil
}

// timing is how a lock with a given TTL is kept: with the configured margin, and the configured
// heartbeat where it fits the TTL, else a third of it (lease.NewTiming).
func (c *Config) timing(ttl time.Duration) (lease.Timing, error) {
	return lease.NewTiming(ttl, c.HeartbeatInterval, c.SafetyMargin)
}
