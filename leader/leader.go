package leader

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/observe"
	"github.com/pglock/pglock/internal/retry"
	"github.com/pglock/pglock/tablelock"
)

// lockPrefix starts the name of an election's lock.
const lockPrefix = "pglock.leader/"

// LockName is the table lock an election's leadership is: its holder leads, its token is the
// term (what pglockctl and the console release to make a leader resign).
func LockName(election string) string { return lockPrefix + election }

// MaxNameLen is the longest election name, in bytes: its lock's name is lockPrefix followed by
// it.
const MaxNameLen = pglock.MaxNameLen - len(lockPrefix)

// Config configures an Elector. A nil *Config, and every zero field, means the default.
type Config struct {
	// AppName names this process in the instance recorded with its leadership, app@host:pid.
	// Default: the executable's base name.
	AppName string

	// TTL is the leader's lease, renewed every third of it. A leader that crashes is replaced
	// once it expires (plus a poll); a leader cut off from the database stops (its OnElected
	// context is canceled) a tenth of it before. From tablelock.MinTTL to tablelock.MaxTTL.
	// Default: DefaultTTL.
	TTL time.Duration

	// DisableNotifications and ListenerConnConfig are tablelock.Config's: for a pool that
	// cannot LISTEN (PgBouncer in transaction pooling mode), candidates poll, or listen on a
	// direct connection. Default: listen as the pool connects.
	DisableNotifications bool
	ListenerConnConfig   *pgx.ConnConfig

	// Logger receives the Elector's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told when this Elector is elected (with the vacancy before it),
	// resigns or loses leadership (with the cause and tenure), and of a refused Fence
	// (pglock.Event, Primitive leader), without ever holding them up. Default: none.
	Observer pglock.Observer
}

// Callbacks are what an Elector calls as leadership comes and goes. Each runs on Run's
// goroutine but OnNewLeader, which runs on a goroutine of its own, one call at a time.
type Callbacks struct {
	// OnElected runs while this Elector leads, with the term; ctx is canceled when leadership
	// ends. Returning resigns. Required.
	OnElected func(ctx context.Context, term int64)
	// OnDemoted runs after OnElected has returned, once leadership has ended. Optional.
	OnDemoted func(term int64)
	// OnNewLeader is told of each new leader the Elector sees, itself included: at once when a
	// candidate is handed leadership, and by the old lease's expiry when a leader crashed. It
	// reads the leader when woken, so a term that ends before that read is not told. Optional.
	OnNewLeader func(Leader)
}

// Elector campaigns in one election. Its methods are safe for concurrent use; Run runs once at
// a time.
type Elector struct {
	events   *observe.Emitter // nil without an Observer
	pool     *pgxpool.Pool
	name     string
	lockName string
	cfg      Config
	backoff  backoff.Capped // campaignBackoff; a test of many short terms shortens it

	mu       sync.Mutex
	running  bool
	lock     *tablelock.Lock         // while leading
	end      context.CancelCauseFunc // ends the current leadership
	released chan struct{}           // closed once the current term's lock is released
	changed  chan struct{}           // wakes the OnNewLeader watcher
}

// DefaultTTL is Config.TTL's default: shorter than a lock's ([pglock.DefaultTTL]), so that a
// crashed leader is replaced sooner (docs/leader.md).
const DefaultTTL = 15 * time.Second

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// New returns an Elector for the election name (1 to MaxNameLen bytes of UTF-8 without NUL)
// that takes its connections from pool. A nil cfg means the defaults.
func New(pool *pgxpool.Pool, name string, cfg *Config) (*Elector, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	if err := validateName(name); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	if c.TTL < tablelock.MinTTL || c.TTL > tablelock.MaxTTL {
		return nil, errs.Errorf("%w: %w: Config.TTL %s is outside [%s, %s]", pglock.ErrInvalidTTL, pglock.ErrInvalidArgument, c.TTL, tablelock.MinTTL, tablelock.MaxTTL)
	}
	// tablelock checks the rest: make one now, so that a mistake is found here.
	l, err := newLocker(pool, c, name, nil)
	if err != nil {
		return nil, err
	}
	l.Close(context.Background())
	return &Elector{events: observe.New(c.Observer, c.Logger), pool: pool, name: name, lockName: lockPrefix + name, cfg: c, backoff: campaignBackoff, changed: make(chan struct{}, 1)}, nil
}

func validateName(name string) error {
	if err := pglock.ValidateName(name); err != nil {
		return errs.Errorf("election name: %w", err)
	}
	if len(name) > MaxNameLen {
		return errs.Errorf("%w: election name of %d bytes, the limit is %d", pglock.ErrInvalidName, len(name), MaxNameLen)
	}
	return nil
}

// newLocker makes the Locker a Run campaigns with; events, when not nil, is told the failed
// renewals of its terms in election.
func newLocker(pool *pgxpool.Pool, c Config, election string, events *observe.Emitter) (*tablelock.Locker, error) {
	cfg := &tablelock.Config{
		AppName: c.AppName, TTL: c.TTL, DisableNotifications: c.DisableNotifications,
		ListenerConnConfig: c.ListenerConnConfig, Logger: c.Logger,
	}
	if events != nil {
		cfg.Observer = pglock.ObserverFunc(func(ctx context.Context, e pglock.Event) {
			if e.Kind == pglock.EventRenewFailed {
				e.Primitive, e.Name = pglock.PrimitiveLeader, election
				events.Emit(ctx, e)
			}
		})
	}
	if !c.DisableNotifications {
		// A release notifies the next candidate, and a candidate polls at its leader's expiry
		// anyway: between those, only to keep its place in the queue alive.
		cfg.MaxPollInterval = c.TTL / 3
	}
	return tablelock.New(pool, cfg)
}

// campaignBackoff spaces campaigns that fail (the database unreachable), and those after terms
// OnElected ended at once of itself (one that returns straight away would otherwise spin).
var campaignBackoff = backoff.Capped{First: 100 * time.Millisecond, Max: 5 * time.Second}

// Run campaigns until ctx is done, calling cb as leadership comes and goes, and returns nil
// then (leadership, if held, is handed on first). A database that cannot be reached is retried
// with backoff, and logged. Run returns an error for bad input, a second Run at once, and a
// failure retrying cannot mend (a database not migrated, a privilege missing).
func (e *Elector) Run(ctx context.Context, cb Callbacks) error {
	if cb.OnElected == nil {
		return errs.Errorf("%w: nil OnElected", pglock.ErrInvalidArgument)
	}
	e.mu.Lock()
	if e.running {
		e.mu.Unlock()
		return errs.Errorf("%w: Run of election %q is already running", pglock.ErrInvalidArgument, e.name)
	}
	e.running = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running = false
		e.mu.Unlock()
	}()

	locker, err := newLocker(e.pool, e.cfg, e.name, e.events)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.TTL)
		defer cancel()
		locker.Close(closeCtx)
	}()
	if r, ok := e.cfg.Observer.(pglock.LeadershipReader); ok {
		defer r.ReadLeadership(e.name, e.Term)()
	}
	if cb.OnNewLeader != nil {
		watchCtx, stopWatching := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			e.watch(watchCtx, cb.OnNewLeader)
		}()
		defer func() { stopWatching(); <-watched }()
	}
	for failures, shortTerms := 0, 0; ctx.Err() == nil; {
		lk, err := locker.Acquire(ctx, e.lockName, &tablelock.AcquireOptions{Metadata: map[string]any{"election": e.name}})
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !retry.Transient(err):
			return errs.Errorf("campaign in election %q: %w", e.name, err)
		case err != nil:
			failures++
			e.cfg.Logger.Warn("pglock: campaign failed; retrying", "election", e.name, "failures", failures, "error", err)
			e.backoff.Sleep(ctx, clock.Real, failures)
			continue
		}
		failures = 0
		began := time.Now()
		if returned := e.lead(ctx, lk, cb); !returned || time.Since(began) >= e.cfg.TTL/3 {
			shortTerms = 0
			continue
		}
		shortTerms++
		e.backoff.Sleep(ctx, clock.Real, shortTerms)
	}
	return nil
}

// lead runs one term: OnElected until leadership ends, the release as soon as it ends, then
// OnDemoted. It reports whether OnElected returned of itself, with its leadership intact.
func (e *Elector) lead(ctx context.Context, lk *tablelock.Lock, cb Callbacks) (returned bool) {
	term := lk.Token()
	electedAt := time.Now()
	electedCtx, end := context.WithCancelCause(ctx)
	released := make(chan struct{})
	e.mu.Lock()
	e.lock, e.end, e.released = lk, end, released
	e.mu.Unlock()
	e.wakeWatcher()

	// Leadership ends when the lock is lost, Resign or ctx ends it, or OnElected returns; the
	// lock is released then, not when OnElected returns, so that the next candidate need not
	// wait for a leader that is slow to stop.
	go func() {
		defer close(released)
		select {
		case <-lk.Lost():
			end(lk.Err())
		case <-electedCtx.Done():
		}
		e.mu.Lock()
		e.lock, e.end, e.released = nil, nil, nil
		e.mu.Unlock()
		// Bounded by a heartbeat: past it (a connection gone silent) the release goes on in the
		// background, and OnDemoted need not wait for it.
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.TTL/3)
		defer cancel()
		err := lk.Release(releaseCtx)
		if err != nil && !errors.Is(err, pglock.ErrLockLost) { // a lost lock was signalled already
			e.cfg.Logger.Warn("pglock: release of leadership failed; it ends with its lease", "election", e.name, "term", term, "error", err)
		}
	}()
	elected := false
	defer func() {
		end(errs.Errorf("%w: OnElected of election %q returned", errResigned, e.name))
		<-released
		if elected {
			ended := pglock.Event{Kind: pglock.EventLeader, Primitive: pglock.PrimitiveLeader, Name: e.name, Token: term,
				Outcome: pglock.OutcomeResigned, Held: time.Since(electedAt)}
			if lost := lk.Err(); lost != nil {
				ended.Outcome, ended.Cause, ended.Err = pglock.OutcomeLost, pglock.CauseOf(lost), lost
			}
			e.events.Emit(ctx, ended)
		}
		if elected && cb.OnDemoted != nil {
			cb.OnDemoted(term)
		}
	}()
	if ctx.Err() != nil {
		return false // elected as Run was told to stop: hand it on at once, unannounced
	}
	elected = true
	e.events.Emit(ctx, pglock.Event{Kind: pglock.EventLeader, Primitive: pglock.PrimitiveLeader, Name: e.name, Token: term,
		Outcome: pglock.OutcomeElected, Vacancy: lk.Vacancy()})
	cb.OnElected(electedCtx, term)
	return electedCtx.Err() == nil
}

// errResigned is the cause of an OnElected context canceled by a resignation.
var errResigned = errors.New("pglock: leadership resigned")

// Resign ends this Elector's leadership, if it leads: OnElected's context is canceled, and the
// lock is released, handing leadership to the next candidate, before it returns (unless ctx
// ends first). Run campaigns again afterwards, behind the candidates already waiting.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	end, released := e.end, e.released
	e.mu.Unlock()
	if end == nil {
		return nil
	}
	end(errs.Errorf("%w: Resign was called for election %q", errResigned, e.name))
	select {
	case <-released: // by the term's one releaser
		return nil
	case <-ctx.Done():
		return errs.Errorf("resign from election %q: %w", e.name, context.Cause(ctx))
	}
}

// IsLeader reports whether this Elector leads now, without a round trip: elected, and its lease
// valid by this process's monotonic clock less its safety margin ([tablelock.Lock.Deadline]), so
// never once a successor could be elected. Leadership taken away by force (ForceResign) is
// noticed at the next renewal: Fence is the check to trust for a write.
func (e *Elector) IsLeader() bool { return e.Term() != 0 }

// Term returns the term this Elector leads in, or 0 when it does not lead, as IsLeader tells.
func (e *Elector) Term() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lock == nil || e.lock.Err() != nil || !time.Now().Before(e.lock.Deadline()) {
		return 0
	}
	return e.lock.Token()
}

// Fence verifies, inside tx, that this Elector still leads with its current term, and keeps it
// so until tx ends (no successor can be elected before), bounding tx on the server as
// [tablelock.Lock.Fence] does. Write after Fence, and commit at once. It returns an error
// matching [pglock.ErrNotHeld] when the Elector does not lead, and [pglock.ErrLockLost] when it
// has just lost leadership (which ends it). Work begun in an earlier term that may outlive it
// should compare that term with Term as well: an Elector elected again fences for its new term.
func (e *Elector) Fence(ctx context.Context, tx pgx.Tx) error {
	if _, err := db.InTx(tx); err != nil {
		return err // before saying whether it leads: the transaction is wrong either way
	}
	return e.fence(ctx, func(lk *tablelock.Lock) error { return lk.Fence(ctx, tx) }, nil)
}

// FenceSQL is Fence for a database/sql transaction, of any PostgreSQL driver, as
// [tablelock.Lock.FenceSQL] is.
func (e *Elector) FenceSQL(ctx context.Context, tx *sql.Tx) error {
	q, err := db.InSQLTx(tx)
	if err != nil {
		return err // before saying whether it leads: the transaction is wrong either way
	}
	// database/sql tells a transaction committed, rolled back or on another server only when
	// it is used: the fence uses it, and an Elector that does not lead asks it its backend.
	usable := func() error {
		var pid int32
		if err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); errors.Is(err, pglock.ErrInvalidArgument) {
			return err
		}
		return nil // a transaction that is usable but failed is the caller's to see
	}
	return e.fence(ctx, func(lk *tablelock.Lock) error { return lk.FenceSQL(ctx, tx) }, usable)
}

// fence fences with the current term's lock; with none, it checks the transaction with
// usable, if given, before it says that this Elector does not lead.
func (e *Elector) fence(ctx context.Context, fence func(*tablelock.Lock) error, usable func() error) error {
	e.mu.Lock()
	lk := e.lock
	e.mu.Unlock()
	if lk == nil {
		if usable != nil {
			if err := usable(); err != nil {
				return err
			}
		}
		return errs.Errorf("%w: this elector does not lead election %q", pglock.ErrNotHeld, e.name)
	}
	err := fence(lk)
	if errors.Is(err, pglock.ErrLockLost) { // a term lost, noticed before or by this fence
		e.events.Emit(ctx, pglock.Event{Kind: pglock.EventFenceRefused, Primitive: pglock.PrimitiveLeader, Name: e.name, Token: lk.Token(), Err: err})
	}
	return err
}
