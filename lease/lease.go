package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
	keeping "github.com/pglock/pglock/internal/lease"
)

// The TTLs a lease may have; pglock's SQL contract refuses others, and [NewTiming] too.
const (
	MinTTL = keeping.MinTTL
	MaxTTL = keeping.MaxTTL
)

// Timing is how a lease is kept; make one with [NewTiming].
type Timing struct {
	TTL       time.Duration // the lease, as the store counts it
	Heartbeat time.Duration // how often it is renewed; 0: never (the holder renews it with Renew)
	Margin    time.Duration // how long before the store could give it away it is declared lost
}

// NewTiming is how a lease of ttl is kept: with margin (0: a tenth of the TTL), and renewed every
// heartbeat where that fits the TTL before the margin, else (and for 0) every third of the TTL; a
// negative heartbeat means never. The TTL is kept in whole milliseconds. A TTL outside [MinTTL,
// MaxTTL], or one that leaves no room for a heartbeat (a third of it) before the margin, gets an
// error matching [pglock.ErrInvalidTTL]; a negative margin, or a heartbeat under a millisecond
// (renewals back to back), one matching [pglock.ErrInvalidArgument].
func NewTiming(ttl, heartbeat, margin time.Duration) (Timing, error) {
	t, err := keeping.NewTiming(ttl, heartbeat, margin)
	return Timing(t), err
}

// RenewFunc renews the lease for ttl from now, in one request: the new expiry by the store's
// clock, or held false once the lease is no longer this holder's (expired, or taken from it).
// An error is a renewal that did not get through: retried until the deadline.
type RenewFunc func(ctx context.Context, ttl time.Duration) (expiresAt time.Time, held bool, err error)

// Tracker counts the keeper's background work in its owner, so that the owner can wait for it
// when it shuts down: Begin reports false once the owner has stopped, and nothing starts then.
// [Group] is one.
type Tracker interface {
	Begin() bool
	End()
}

// Group is a [Tracker] for an owner that stops by waiting: Wait refuses new work and waits for
// what began. The zero Group is ready to use.
type Group struct{ g keeping.Group }

// Begin counts one piece of work in, false once Wait has begun.
func (g *Group) Begin() bool { return g.g.Begin() }

// End counts one piece of work out.
func (g *Group) End() { g.g.End() }

// Wait refuses new work and waits for the work under way to end.
func (g *Group) Wait() { g.g.Wait() }

// Config describes one lease. Name, Renew, Timing (one NewTiming could make), Start and Ctx are
// required.
type Config struct {
	Name      string          // what is leased, as errors name it (quoted)
	Renew     RenewFunc       // renews the lease, on every heartbeat and every Renew
	Timing    Timing          // from NewTiming
	Start     time.Time       // when the request that took the lease started, on this process's clock
	ExpiresAt time.Time       // the lease's end by the store's clock, as that request returned it
	Ctx       context.Context // renewals run under it: it ends with the owner
	Tracker   Tracker         // counts the keeper's renewals in its owner; nil for none

	// OnLost is called once, when the lease is declared lost, with the error Err returns.
	OnLost func(err error, cause pglock.Cause)
	// OnRenewFailed is called when a heartbeat failed and will be retried.
	OnRenewFailed func(err error, failures int)
}

// Keeper keeps one lease. Its methods are safe for concurrent use.
type Keeper struct{ k *keeping.Keeper }

// New returns a Keeper for a lease just taken. It keeps nothing until Start. A Config without a
// required field gets an error matching [pglock.ErrInvalidArgument]; one whose Timing NewTiming
// could not have made, the error NewTiming would give.
func New(cfg Config) (*Keeper, error) {
	var missing []string
	for field, absent := range map[string]bool{
		"Name": cfg.Name == "", "Renew": cfg.Renew == nil, "Timing": cfg.Timing == Timing{},
		"Start": cfg.Start.IsZero(), "Ctx": cfg.Ctx == nil,
	} {
		if absent {
			missing = append(missing, field)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: lease.Config lacks %s", pglock.ErrInvalidArgument, strings.Join(missing, ", "))
	}
	if err := keeping.Timing(cfg.Timing).Valid(); err != nil {
		return nil, err
	}
	return &Keeper{keeping.New(keeping.Config{
		Name: cfg.Name, Renew: keeping.RenewFunc(cfg.Renew), Timing: keeping.Timing(cfg.Timing),
		Start: cfg.Start, ExpiresAt: cfg.ExpiresAt, Ctx: cfg.Ctx, Tracker: cfg.Tracker,
		OnLost: cfg.OnLost, OnRenewFailed: cfg.OnRenewFailed,
	})}, nil
}

// Start starts keeping the lease: the heartbeat, its retries, and the loss at the deadline.
// Keeping ends at Stop or loss, or when Config.Ctx ends.
func (k *Keeper) Start() { k.k.Start() }

// Lost is closed once the lease is lost. It is never closed for a lease stopped normally.
func (k *Keeper) Lost() <-chan struct{} { return k.k.Lost() }

// Err returns nil until the lease is lost, then an error matching [pglock.ErrLockLost] that
// says why ([pglock.CauseOf] reads the cause from it).
func (k *Keeper) Err() error { return k.k.Err() }

// Guard returns a context derived from ctx that is canceled, with the loss as its cause, when
// the lease is lost: the context of a function running under the lease. Call stop when the
// function returns.
func (k *Keeper) Guard(ctx context.Context) (guarded context.Context, stop func()) {
	return k.k.Guard(ctx)
}

// Renew renews the lease now, with t's timing (one NewTiming could make, or it is refused as New
// refuses it; the current one when t is nil),
// and keeps it so from then on; a heartbeat under way finishes first, and ctx bounds that wait
// too.
func (k *Keeper) Renew(ctx context.Context, t *Timing) error {
	if t != nil {
		if err := keeping.Timing(*t).Valid(); err != nil {
			return err
		}
	}
	return k.k.Renew(ctx, (*keeping.Timing)(t))
}

// ExpiresAt returns when the lease ends unless renewed, by the store's clock, as of the last
// successful renewal.
func (k *Keeper) ExpiresAt() time.Time { return k.k.ExpiresAt() }

// Deadline returns when, on this process's clock, the lease will be declared lost unless
// renewed.
func (k *Keeper) Deadline() time.Time { return k.k.Deadline() }

// Stop ends the keeping, for a lease its holder gives up (release it in the store after); false
// if it was stopped already. A stopped lease is never declared lost by the keeper.
func (k *Keeper) Stop() bool { return k.k.Stop() }

// Lose declares the lease lost with err (which should match [pglock.ErrLockLost]) for cause,
// once, unless it was stopped: when the holder learns of the loss some other way (a fence
// check, a shutdown).
func (k *Keeper) Lose(cause pglock.Cause, err error) { k.k.Lose(cause, err) }

// LostBeforeStop declares a stopped lease lost ([pglock.CauseForceReleased]) when its release
// found it gone; false if it had been declared lost already, which then stands.
func (k *Keeper) LostBeforeStop(err error) bool { return k.k.LostBeforeStop(err) }

// Backoff is capped exponential backoff with jitter: the n-th wait (from 1) is drawn from
// [d/2, d], where d is First doubled n-1 times, at most Max.
type Backoff struct {
	First time.Duration // 0 (or less): DefaultFirstBackoff
	Max   time.Duration // less than First: First
}

// DefaultFirstBackoff is a Backoff's first wait when its First is not positive.
const DefaultFirstBackoff = 10 * time.Millisecond

// RetryBackoff is how pglock retries a failed renewal or release of a lease renewed every
// heartbeat: from 10 ms, doubling, up to the heartbeat (1 s without one).
func RetryBackoff(heartbeat time.Duration) Backoff {
	return Backoff(keeping.RetryBackoff(heartbeat))
}

// Delay is the wait before retry n.
func (b Backoff) Delay(n int) time.Duration { return b.capped().Delay(n) }

// Sleep waits for retry n, and reports false if ctx ended first.
func (b Backoff) Sleep(ctx context.Context, n int) bool {
	return b.capped().Sleep(ctx, clock.Real, n)
}

func (b Backoff) capped() backoff.Capped {
	if b.First <= 0 {
		b.First = DefaultFirstBackoff
	}
	return backoff.Capped{First: b.First, Max: max(b.Max, b.First)}
}
