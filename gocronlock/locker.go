package gocronlock

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/tablelock"
)

// DefaultPrefix starts the name of each job's lock: the job's name (gocron's key) follows.
const DefaultPrefix = "gocron/"

// unlockTimeout bounds Unlock's round trip: gocron gives it the job's context, which its
// shutdown has canceled, and the lock must be released (or its hold set) all the same.
const unlockTimeout = 10 * time.Second

// Options configure a Locker. A nil *Options means the defaults.
type Options struct {
	// TTL is each run's lease, renewed every third of it while the job runs: a process that
	// dies mid-run leaves the job to the other instances once it runs out (or once the minimum
	// hold has, if that is later). Default: the tablelock.Locker's.
	TTL time.Duration

	// Prefix starts the name of each job's lock. Default: DefaultPrefix.
	Prefix string

	// OnLost is told, on a goroutine of its own, when a run's lock is lost while its job runs:
	// the job's name, why (pglock.CauseOf), and the error (matching pglock.ErrLockLost).
	// Another instance may then run the job: gocron cannot stop a running one, so stop it from
	// here. The tablelock.Locker's Observer sees the loss too (otelpglock counts it in
	// pglock.lease.losses). Default: none; the loss is logged by the tablelock.Locker.
	OnLost func(job string, cause pglock.Cause, err error)
}

// Locker is a gocron.Locker: each run of a job holds the job's table lock, renewed while the job
// runs and kept after it until the run has held it for the minimum hold. Install it with
// gocron.WithDistributedLocker, or for one job with gocron.WithDistributedJobLocker (Every).
type Locker struct {
	locker  *tablelock.Locker
	minHold time.Duration
	opts    Options
}

// NewLocker returns a Locker over locker whose runs hold their job's lock for at least minHold,
// by the database's clock, from the moment they took it: a little under the shortest interval
// among the jobs it locks (Every derives it from one job's). It must be positive.
func NewLocker(locker *tablelock.Locker, minHold time.Duration, opts *Options) (*Locker, error) {
	if locker == nil {
		return nil, errorf("%w: nil *tablelock.Locker", pglock.ErrInvalidArgument)
	}
	if minHold <= 0 {
		return nil, errorf("%w: the minimum hold must be positive, not %s", pglock.ErrInvalidArgument, minHold)
	}
	l := &Locker{locker: locker, minHold: minHold}
	if opts != nil {
		l.opts = *opts
	}
	// Found here, not by the first Lock: gocron drops Lock's errors unlogged, and the job would
	// silently never run.
	if l.opts.TTL != 0 && (l.opts.TTL < tablelock.MinTTL || l.opts.TTL > tablelock.MaxTTL) {
		return nil, errorf("%w: %w: Options.TTL %s is outside [%s, %s]", pglock.ErrInvalidTTL, pglock.ErrInvalidArgument,
			l.opts.TTL, tablelock.MinTTL, tablelock.MaxTTL)
	}
	if l.opts.Prefix == "" {
		l.opts.Prefix = DefaultPrefix
	}
	if err := pglock.ValidateName(l.opts.Prefix + "x"); err != nil { // room for a job's name, too
		return nil, errorf("Options.Prefix: %w", err)
	}
	if strings.HasPrefix(l.opts.Prefix, tablelock.SemaphorePrefix) {
		return nil, errorf("%w: Options.Prefix %q: names starting %q are reserved for semaphores", pglock.ErrInvalidName, l.opts.Prefix, tablelock.SemaphorePrefix)
	}
	return l, nil
}

// Every returns the Locker for a job run every interval, for gocron.WithDistributedJobLocker:
// its minimum hold is a little under the interval (a tenth less, at most a second less), so
// that the instance that takes the lock for an interval keeps it past the other instances'
// ticks of that interval, and frees it before the next. That holds while the instances' ticks
// of an interval fall within the hold of the first (their start offsets and clock skew spread
// over less than the hold), and while a tick's acquisition is late by less than the tenth: one
// later by more finds the previous hold still there, and that interval is skipped, never run
// twice. interval must be positive.
func (l *Locker) Every(interval time.Duration) (*Locker, error) {
	if interval <= 0 {
		return nil, errorf("%w: the interval must be positive, not %s", pglock.ErrInvalidArgument, interval)
	}
	every := *l
	every.minHold = interval - min(interval/10, time.Second)
	return &every, nil
}

// MinHold is how long, at least, each run holds its job's lock.
func (l *Locker) MinHold() time.Duration { return l.minHold }

// Lock takes the lock of the job named key for one run, if no other run holds it (an error
// matching [pglock.ErrLocked] otherwise, which makes gocron skip the run: gocron's AfterLockError
// listener sees it, and any other error).
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := l.locker.TryAcquire(ctx, l.opts.Prefix+key, &tablelock.AcquireOptions{TTL: l.opts.TTL,
		Metadata: map[string]any{"gocron_job": key, "min_hold_ms": l.minHold.Milliseconds()}})
	if err != nil {
		return nil, err
	}
	r := &run{lk: lk, minHold: l.minHold, unlocked: make(chan struct{})}
	if l.opts.OnLost != nil {
		go func() {
			select {
			case <-lk.Lost():
			case <-r.unlocked: // the release is done: a lock lost before it is lost still
				if lk.Err() == nil {
					return
				}
			}
			l.opts.OnLost(key, pglock.CauseOf(lk.Err()), lk.Err())
		}()
	}
	return r, nil
}

// run is one run's hold of its job's lock.
type run struct {
	lk       *tablelock.Lock
	minHold  time.Duration
	once     atomic.Bool
	unlocked chan struct{} // closed by Unlock, once the lock is released
}

// Unlock ends the run: the lock goes once it has been held for the minimum hold, and is no
// longer renewed. It returns an error matching [pglock.ErrLockLost] if the lock was lost.
func (r *run) Unlock(ctx context.Context) error {
	if !r.once.CompareAndSwap(false, true) {
		return errorf("%w: this run's lock of %q was unlocked already", pglock.ErrNotHeld, r.lk.Name())
	}
	defer close(r.unlocked)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	return r.lk.ReleaseAfter(ctx, r.minHold)
}

// errorf is fmt.Errorf for this package's own errors: "pglock: gocronlock: " before format, and
// "pglock: " taken off the front of each error among args (errors.Is and errors.As still see
// it whole), so that the text says "pglock: " once, as every pglock package's does.
func errorf(format string, args ...any) error {
	for i, arg := range args {
		if err, ok := arg.(error); ok && strings.HasPrefix(err.Error(), "pglock: ") {
			args[i] = unprefixed{err}
		}
	}
	return fmt.Errorf("pglock: gocronlock: "+format, args...)
}

// unprefixed is err without "pglock: " in its text.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), "pglock: ") }
func (u unprefixed) Unwrap() error { return u.err }

var _ gocron.Locker = (*Locker)(nil)
