package advisory

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
	"github.com/pglock/pglock/internal/observe"
)

// Config configures a Session. A nil *Config, and every zero field, means the default.
type Config struct {
	// HealthCheckInterval is how often an idle session checks that its connection answers.
	// Default: DefaultHealthCheckInterval.
	HealthCheckInterval time.Duration

	// KeepAlive is the TCP keepalive idle time and probe interval of the session's connection,
	// so that a dead peer is noticed even by a session blocked in a wait.
	// Default: DefaultKeepAlive.
	KeepAlive time.Duration

	// RegisterNames records the name behind each string key the session locks, the first time
	// this process locks it, so that operators see names rather than numbers (see Register).
	// Default: false.
	RegisterNames bool

	// Logger receives the session's logs. Default: slog.Default().
	Logger *slog.Logger

	// Observer, when set, is told of every acquisition, release and loss of the session's
	// locks (pglock.Event, Primitive advisory, Name the key as String shows it), without ever
	// holding them up. Default: none.
	Observer pglock.Observer
}

// The defaults of Config.
const (
	DefaultHealthCheckInterval = time.Second
	DefaultKeepAlive           = 5 * time.Second
)

// withDefaults fills the zero fields of c (nil for none) with the defaults.
func (c *Config) withDefaults() Config {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if cfg.HealthCheckInterval == 0 {
		cfg.HealthCheckInterval = DefaultHealthCheckInterval
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Session holds advisory locks on one connection, pinned from a pool until Close. Its methods
// are safe for concurrent use; they run one at a time on the connection.
type Session struct {
	pool    *pgxpool.Pool
	conn    *pgxpool.Conn
	pid     uint32
	queries *db.Queries
	cfg     Config

	lostCtx  context.Context // done once the connection, and so every lock, is lost
	markLost context.CancelCauseFunc
	stop     context.CancelFunc // ends the health check
	checked  chan struct{}      // closed when the health check has ended

	// interrupt ends the wait under way, if any, so that Close need not wait for it.
	interrupt atomic.Pointer[context.CancelCauseFunc]

	events *observe.Emitter // nil without an Observer

	mu     sync.Mutex // one statement at a time; guards what follows
	held   map[lockID]int
	since  map[lockID]holding // with an Observer: the first hold of each lock held
	closed bool
}

// holding is what a held lock's events need: its first hold's start, ctx and key.
type holding struct {
	at  time.Time
	ctx context.Context
	key Key
}

// Open pins a connection from pool for a new Session.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Session, error) {
	if pool == nil {
		return nil, errs.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	c := cfg.withDefaults()
	if c.HealthCheckInterval < 0 {
		return nil, errs.Errorf("%w: Config.HealthCheckInterval is negative", pglock.ErrInvalidArgument)
	}
	if c.KeepAlive < 0 {
		return nil, errs.Errorf("%w: Config.KeepAlive is negative", pglock.ErrInvalidArgument)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, errs.Errorf("open advisory session: %w", err)
	}
	setKeepAlive(conn.Conn().PgConn().Conn(), c.KeepAlive)

	s := &Session{pool: pool, conn: conn, pid: conn.Conn().PgConn().PID(), queries: db.New(db.Translating(conn)), cfg: c, held: map[lockID]int{}, checked: make(chan struct{}),
		events: observe.New(c.Observer, c.Logger), since: map[lockID]holding{}}
	s.lostCtx, s.markLost = context.WithCancelCause(context.Background())
	var checkCtx context.Context
	checkCtx, s.stop = context.WithCancel(context.Background())
	go s.checkHealth(checkCtx)
	return s, nil
}

func setKeepAlive(conn net.Conn, every time.Duration) {
	if t, ok := conn.(*tls.Conn); ok {
		conn = t.NetConn()
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: every, Interval: every, Count: 3})
	}
}

// Lock waits for the exclusive lock on key. If ctx ends first, the wait is canceled on the
// server too (no request of ours is left in pg_locks), and the error matches
// [pglock.ErrLockTimeout] when ctx's deadline passed. Locking a key the session holds stacks:
// each Lock needs its own Unlock, as in PostgreSQL.
func (s *Session) Lock(ctx context.Context, key Key) error {
	return s.wait(ctx, key, false, time.Now())
}

// RLock waits for the shared lock on key, as Lock does.
func (s *Session) RLock(ctx context.Context, key Key) error {
	return s.wait(ctx, key, true, time.Now())
}

// TryLock takes the exclusive lock on key if it is free, else returns an error matching
// [pglock.ErrLocked].
func (s *Session) TryLock(ctx context.Context, key Key) error {
	return s.try(ctx, key, false, time.Now())
}

// TryRLock takes the shared lock on key if no one holds it exclusively, as TryLock does.
func (s *Session) TryRLock(ctx context.Context, key Key) error {
	return s.try(ctx, key, true, time.Now())
}

// Unlock releases one hold of the exclusive lock on key; [pglock.ErrNotHeld] if there is none.
func (s *Session) Unlock(ctx context.Context, key Key) error { return s.unlock(ctx, key, false) }

// RUnlock releases one hold of the shared lock on key; [pglock.ErrNotHeld] if there is none.
func (s *Session) RUnlock(ctx context.Context, key Key) error { return s.unlock(ctx, key, true) }

// PID is the process id of the session's backend, as pg_locks and pg_stat_activity show it.
func (s *Session) PID() uint32 { return s.pid }

// Lost is closed once the session's connection is lost, and with it every lock it held.
func (s *Session) Lost() <-chan struct{} { return s.lostCtx.Done() }

// Err returns nil while the session is alive, and once it is lost an error matching
// [pglock.ErrLockLost] that says why.
func (s *Session) Err() error {
	if s.lostCtx.Err() == nil {
		return nil
	}
	return context.Cause(s.lostCtx)
}

// Close releases every lock the session holds and gives the connection back to the pool, or
// closes it if it cannot be sure the connection holds nothing.
func (s *Session) Close(ctx context.Context) error {
	s.stop()
	<-s.checked
	if interrupt := s.interrupt.Load(); interrupt != nil {
		(*interrupt)(pglock.ErrClosed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for id := range s.held {
		s.released(id, pglock.EventReleased, "", nil)
	}
	clear(s.held)
	if s.lostCtx.Err() == nil {
		if err := s.queries.AdvisoryUnlockAll(ctx); err == nil {
			s.conn.Release()
			return nil
		}
	}
	err := s.conn.Conn().Close(ctx) // may still hold locks: never back to the pool
	s.conn.Release()
	return err
}

func (s *Session) begin(key Key, shared bool) (lockID, error) {
	id, err := key.lock(shared)
	if err != nil {
		return lockID{}, err
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return lockID{}, errs.Errorf("%s: %w", key, pglock.ErrClosed)
	case s.lostCtx.Err() != nil:
		s.mu.Unlock()
		return lockID{}, s.Err()
	}
	return id, nil
}

// named registers key when the session registers names: through the pool, so that nothing
// that happens to the registration (its ctx ending, say) touches the session's connection.
func (s *Session) named(ctx context.Context, key Key) error {
	if !s.cfg.RegisterNames {
		return nil
	}
	return register(ctx, s.pool, key)
}

func (s *Session) try(ctx context.Context, key Key, shared bool, start time.Time) (err error) {
	if s.events != nil {
		defer s.observeFailure(ctx, key, false, start, &err)
	}
	id, err := s.begin(key, shared)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.named(ctx, key); err != nil {
		return err
	}
	acquired, err := s.tryLock(ctx, id)
	if err != nil {
		return s.failed(key, err)
	}
	if !acquired {
		return errs.Errorf("%s: %w", key, pglock.ErrLocked)
	}
	s.hold(ctx, id, key, false, start)
	return nil
}

// wait runs the blocking lock without a context, so that ctx ending does not close the
// connection (and lose every other lock on it), and cancels it on the server instead.
func (s *Session) wait(ctx context.Context, key Key, shared bool, start time.Time) (err error) {
	if s.events != nil {
		defer s.observeFailure(ctx, key, true, start, &err)
	}
	id, err := s.begin(key, shared)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return waitError(ctx, key)
	}
	if err := s.named(ctx, key); err != nil {
		return err
	}
	ctx, interrupt := context.WithCancelCause(ctx)
	defer interrupt(nil)
	s.interrupt.Store(&interrupt)
	defer s.interrupt.Store(nil)

	pgConn := s.conn.Conn().PgConn()
	canceled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(canceled)
		cancelCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pgConn.CancelRequest(cancelCtx)
	})
	err = s.queries.AdvisoryLock(context.Background(), id.params())
	if !stop() {
		// A cancel request was sent. Wait until the server has it, then run statements until
		// one is not canceled: a cancel that arrives late must not land on a later statement.
		<-canceled
		s.absorbCancel()
	}
	if err == nil {
		s.hold(ctx, id, key, true, start) // granted, even if ctx ended meanwhile
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !slices.Contains([]string{pgerrcode.QueryCanceled, pgerrcode.LockNotAvailable, pgerrcode.DeadlockDetected}, pgErr.Code) {
		return s.failed(key, err)
	}
	// Canceled, lock_timeout or deadlock: yet PostgreSQL may have granted the lock just before,
	// and a session lock outlives the aborted statement. Ask.
	if s.held[id] > 0 { // a second hold is indistinguishable from none: trust nothing
		return s.failed(key, errs.Errorf("%w (and whether it was granted cannot be known)", err))
	}
	granted, checkErr := s.queries.AdvisoryHeldBySession(context.Background(), db.AdvisoryHeldBySessionParams(id.params()))
	switch {
	case checkErr != nil:
		return s.failed(key, checkErr)
	case granted:
		s.hold(ctx, id, key, true, start)
		return nil
	case pgErr.Code == pgerrcode.QueryCanceled && ctx.Err() != nil:
		return waitError(ctx, key)
	}
	return errs.Errorf("%s: %w", key, err) // lock_timeout (ErrLockTimeout), deadlock: the session stays
}

// absorbCancel runs statements until one is not canceled: a cancel request that arrived after
// its statement finished interrupts the next one, and that must not be an Unlock.
func (s *Session) absorbCancel() {
	for range 3 {
		err := s.queries.SessionPing(context.Background())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.QueryCanceled {
			return
		}
	}
}

func waitError(ctx context.Context, key Key) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errs.Errorf("%s: %w: %w", key, pglock.ErrLockTimeout, context.Cause(ctx))
	}
	return errs.Errorf("%s: %w", key, context.Cause(ctx))
}

func (s *Session) unlock(ctx context.Context, key Key, shared bool) error {
	id, err := s.begin(key, shared)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.held[id] == 0 {
		return errs.Errorf("%s: %w", key, pglock.ErrNotHeld)
	}
	released, err := s.unlockOnce(ctx, id)
	if err != nil {
		return s.failed(key, err) // unsure whether it still holds the lock: the session goes
	}
	if !released { // PostgreSQL disagrees with our count: trust nothing on this connection
		return s.failed(key, errs.Errorf("%w: PostgreSQL says the session did not hold it", pglock.ErrNotHeld))
	}
	if s.held[id]--; s.held[id] == 0 {
		delete(s.held, id)
		s.released(id, pglock.EventReleased, "", nil)
	}
	return nil
}

// tryLock and unlockOnce send the statement of id's form and mode.
func (s *Session) tryLock(ctx context.Context, id lockID) (bool, error) {
	q := s.queries
	return byForm(ctx, id, q.AdvisoryTryLock, q.AdvisoryTryLockShared, q.AdvisoryTryLockPair, q.AdvisoryTryLockPairShared)
}

func (s *Session) unlockOnce(ctx context.Context, id lockID) (bool, error) {
	q := s.queries
	return byForm(ctx, id, q.AdvisoryUnlock, q.AdvisoryUnlockShared, q.AdvisoryUnlockPair, q.AdvisoryUnlockPairShared)
}

// byForm sends, of a statement's four forms, the one of id's key and mode, with its one or two
// parameters: not one statement with a CASE over five (queries/advisory.sql says why). P and S
// are sqlc's parameters of the pair forms, exclusive and shared.
func byForm[P, S ~struct {
	Ns int32
	ID int32
}](ctx context.Context, id lockID, key, keyShared func(context.Context, int64) (bool, error),
	pair func(context.Context, P) (bool, error), pairShared func(context.Context, S) (bool, error)) (bool, error) {
	switch {
	case id.pair && id.shared:
		return pairShared(ctx, S{Ns: id.ns, ID: id.minor})
	case id.pair:
		return pair(ctx, P{Ns: id.ns, ID: id.minor})
	case id.shared:
		return keyShared(ctx, id.id)
	default:
		return key(ctx, id.id)
	}
}

// hold counts a hold of id, begun at start; the first is an acquisition and starts its holding.
// A hold stacked on one the session has is neither: it waits for nothing and ends nothing.
// Called with mu held.
func (s *Session) hold(ctx context.Context, id lockID, key Key, blocking bool, start time.Time) {
	if s.held[id]++; s.held[id] == 1 && s.events != nil {
		s.since[id] = holding{at: time.Now(), ctx: ctx, key: key}
		s.events.Emit(ctx, pglock.Event{Kind: pglock.EventAcquire, Primitive: pglock.PrimitiveAdvisory, Name: key.String(),
			Blocking: blocking, Wait: time.Since(start), Outcome: pglock.OutcomeAcquired})
	}
}

// released reports the end of id's holding. Called with mu held.
func (s *Session) released(id lockID, kind pglock.EventKind, cause pglock.Cause, err error) {
	h, ok := s.since[id]
	if !ok {
		return
	}
	delete(s.since, id)
	s.events.Emit(h.ctx, pglock.Event{Kind: kind, Primitive: pglock.PrimitiveAdvisory, Name: h.key.String(),
		Held: time.Since(h.at), Cause: cause, Err: err})
}

// observeFailure reports an acquisition begun at start that failed (hold reports those that
// succeed).
func (s *Session) observeFailure(ctx context.Context, key Key, blocking bool, start time.Time, err *error) {
	if *err == nil {
		return
	}
	s.events.Emit(ctx, pglock.Event{Kind: pglock.EventAcquire, Primitive: pglock.PrimitiveAdvisory, Name: key.String(),
		Blocking: blocking, Wait: time.Since(start), Outcome: observe.AcquireOutcome(*err), Err: *err})
}

// failed ends a session whose connection failed, or whose state is unknown: it is closed (so
// PostgreSQL frees whatever it held) and the session is lost. Called with mu held.
func (s *Session) failed(key Key, err error) error {
	err = errs.Errorf("%s: %w", key, err)
	if pgconn.SafeToRetry(err) { // never sent (ctx ended first): the connection is as it was
		return err
	}
	s.lose(err)
	return err
}

func (s *Session) lose(cause error) {
	if s.lostCtx.Err() != nil {
		return
	}
	err := errs.Errorf("%w: advisory session: %w", pglock.ErrLockLost, cause)
	s.markLost(err)
	for id := range s.held {
		s.released(id, pglock.EventLost, pglock.CauseConnectionLost, err)
	}
	s.conn.Conn().PgConn().Close(context.Background())
	s.cfg.Logger.Error("pglock: advisory session lost", "error", cause)
}

// checkHealth pings the connection every interval while no statement runs (a running one
// notices a dead connection itself).
func (s *Session) checkHealth(ctx context.Context) {
	defer close(s.checked)
	ticker := time.NewTicker(s.cfg.HealthCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.lostCtx.Done():
			return
		case <-ticker.C:
		}
		if !s.mu.TryLock() {
			continue
		}
		if !s.closed && s.lostCtx.Err() == nil {
			// Not ctx: Close cancels that, and a ping cut short would close a healthy connection.
			pingCtx, cancel := context.WithTimeout(context.Background(), s.cfg.HealthCheckInterval)
			if err := s.queries.SessionPing(pingCtx); err != nil {
				s.lose(errs.Errorf("health check: %w", err))
			}
			cancel()
		}
		s.mu.Unlock()
	}
}
