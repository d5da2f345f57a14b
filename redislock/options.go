package redislock

import (
	"encoding/json"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/lease"
)

// The defaults of Options, and the TTLs a lock may have.
const (
	DefaultTTL             = pglock.DefaultTTL
	DefaultPrefix          = "pglock"
	DefaultMaxPollInterval = time.Second
	DefaultNodeTimeout     = 100 * time.Millisecond

	MinTTL = lease.MinTTL
	MaxTTL = lease.MaxTTL

	MinPollInterval = 10 * time.Millisecond
)

// Options configure a Locker or a Redlock. A nil *Options, and every zero field, means the
// default.
type Options struct {
	// TTL is each lock's lease on Redis's clock (PX). Default: DefaultTTL.
	TTL time.Duration

	// HeartbeatInterval is how often a held lock is renewed, at least a millisecond. Default: a
	// third of the TTL. Negative: never; the lock is then lost at its TTL less the safety margin.
	HeartbeatInterval time.Duration

	// SafetyMargin is how long before Redis could expire a lock its holder declares it lost
	// (its Lost closed, WithLock's fn canceled). Default: a tenth of the TTL; a Redlock's is
	// at least its clock drift allowance (1% of the TTL plus 2 ms).
	SafetyMargin time.Duration

	// Prefix starts every key and the channel the Locker writes (keys {prefix:name}:lock and
	// so on). Lockers share locks when they share a prefix. At most 64 bytes, without '{', '}'
	// or ':'. Default: DefaultPrefix.
	Prefix string

	// AppName names this process in the instance stored with each lock, app@host:pid.
	// Default: the executable's base name.
	AppName string

	// Metadata is stored with each lock this Locker takes, shown by Locker.Holder. Default:
	// none.
	Metadata map[string]any

	// MaxPollInterval caps the backoff between a waiter's attempts: a release wakes the first
	// waiter at once (a message on the prefix's channel), and the polls are the safety net for
	// a wake-up lost on its way, and what keeps a waiter's place. A waiter's place lapses after
	// three of them without an attempt. At least MinPollInterval. Default:
	// DefaultMaxPollInterval.
	MaxPollInterval time.Duration

	// NodeTimeout bounds each Redlock node's answer, so that a node that does not answer costs
	// an attempt little of the lock's validity. Default: DefaultNodeTimeout. Locker ignores it.
	NodeTimeout time.Duration
}

// config is Options with the defaults filled in and checked.
type config struct {
	timing      lease.Timing
	prefix      string
	instance    string
	metadata    string // JSON, "" for none
	maxPoll     time.Duration
	place       time.Duration // how long a waiter's place lasts without an attempt
	nodeTimeout time.Duration
}

// newConfig checks opts (nil for the defaults); every mistake is an error matching
// [pglock.ErrInvalidArgument] ([pglock.ErrInvalidTTL] for the TTL) that names the field. redlock
// says the margin must cover the clock drift allowance.
func newConfig(opts *Options, redlock bool) (config, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	invalid := func(field, format string, args ...any) error {
		return errorf("%w: Options."+field+" "+format, append([]any{pglock.ErrInvalidArgument}, args...)...)
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.TTL < 0 {
		return config{}, errorf("%w: %w: Options.TTL (%s) is not positive", pglock.ErrInvalidArgument, pglock.ErrInvalidTTL, o.TTL)
	}
	if o.SafetyMargin < 0 {
		return config{}, invalid("SafetyMargin", "(%s) is negative", o.SafetyMargin)
	}
	if redlock && o.SafetyMargin != 0 && o.SafetyMargin < drift(o.TTL) {
		return config{}, invalid("SafetyMargin", "(%s) is shorter than the clock drift allowance (%s)", o.SafetyMargin, drift(o.TTL))
	}
	if o.HeartbeatInterval > 0 && o.HeartbeatInterval < time.Millisecond {
		return config{}, invalid("HeartbeatInterval", "(%s) is under a millisecond: renewals back to back", o.HeartbeatInterval)
	}
	t, err := lease.NewTiming(o.TTL, o.HeartbeatInterval, o.SafetyMargin)
	if err != nil {
		return config{}, errorf("%w: Options.TTL, HeartbeatInterval, SafetyMargin: %w", pglock.ErrInvalidArgument, err)
	}
	if redlock {
		t.Margin = max(t.Margin, drift(t.TTL))
	}
	c := config{timing: t, prefix: o.Prefix, maxPoll: o.MaxPollInterval, nodeTimeout: o.NodeTimeout}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if strings.ContainsAny(c.prefix, "{}:") || len(c.prefix) > 64 {
		return config{}, invalid("Prefix", "(%.70q) holds '{', '}' or ':', or is longer than 64 bytes", c.prefix)
	}
	switch {
	case c.maxPoll == 0:
		c.maxPoll = DefaultMaxPollInterval
	case c.maxPoll < MinPollInterval:
		return config{}, invalid("MaxPollInterval", "(%s) is shorter than %s", c.maxPoll, MinPollInterval)
	}
	c.place = 3 * c.maxPoll
	switch {
	case c.nodeTimeout == 0:
		c.nodeTimeout = DefaultNodeTimeout
	case c.nodeTimeout < 0:
		return config{}, invalid("NodeTimeout", "(%s) is negative", c.nodeTimeout)
	}
	if redlock && c.nodeTimeout >= t.TTL-t.Margin {
		return config{}, invalid("NodeTimeout", "(%s) leaves no validity in a TTL of %s less its margin", c.nodeTimeout, t.TTL)
	}
	if c.instance, err = instanceName(o.AppName); err != nil {
		return config{}, invalid("AppName", "%w", err)
	}
	if o.Metadata != nil {
		encoded, err := json.Marshal(o.Metadata)
		if err != nil {
			return config{}, invalid("Metadata", "does not encode as JSON: %w", err)
		}
		c.metadata = string(encoded)
	}
	return c, nil
}

// drift is Redlock's allowance for the nodes' clocks running at different rates over a lock's
// TTL: 1%, plus 2 ms for the granularity of Redis's expiry.
func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// isNil reports whether a client is nil, or a nil pointer in the interface.
func isNil(c redis.UniversalClient) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
