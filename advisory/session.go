package advisory

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/db"
)

// Config configures a Session. A nil *Config, and every zero field, means the default.
type Config struct {
	// HealthCheckInterval is how often an idle session checks that its connection answers.
	// Default: 1 s.
	HealthCheckInterval time.Duration

	// KeepAlive is the TCP keepalive idle time and probe interval of the session's connection,
	// so that a dead peer is noticed even by a session blocked in a wait. Default: 5 s.
	KeepAlive time.Duration

	// RegisterNames records the name behind each string key the session locks, the first time
	// this process locks it, so that operators see names rather than numbers (see Register).
	// Default: false.
	RegisterNames bool

	// Logger receives the session's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Session holds advisory locks on one connection, pinned from a pool until Close. Its methods
// are safe for concurrent use; they run one at a time on the connection.
type Session struct {
	pool    *pgxpool.Pool
	conn    *pgxpool.Conn
	queries *db.Queries
	cfg     Config

	lostCtx  context.Context // done once the connection, and so every lock, is lost
	markLost context.CancelCauseFunc
	stop     context.CancelFunc // ends the health check
	checked  chan struct{}      // closed when the health check has ended

	mu     sync.Mutex // one statement at a time; guards what follows
	held   map[lockID]int
	closed bool
}

// Open pins a connection from pool for a new Session.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Session, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", pglock.ErrInvalidArgument)
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.HealthCheckInterval < 0 || c.KeepAlive < 0 {
		return nil, fmt.Errorf("%w: negative interval in advisory.Config", pglock.ErrInvalidArgument)
	}
	if c.HealthCheckInterval == 0 {
		c.HealthCheckInterval = time.Second
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pglock: open advisory session: %w", err)
	}
	setKeepAlive(conn.Conn().PgConn().Conn(), c.KeepAlive)

	s := &Session{pool: pool, conn: conn, queries: db.New(db.Translating(conn)), cfg: c, held: map[lockID]int{}, checked: make(chan struct{})}
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
// pglock.ErrLockTimeout when ctx's deadline passed. Locking a key the session holds stacks:
// each Lock needs its own Unlock, as in PostgreSQL.
func (s *Session) Lock(ctx context.Context, key Key) error { return s.wait(ctx, key, false) }

// RLock waits for the shared lock on key, as Lock does.
func (s *Session) RLock(ctx context.Context, key Key) error { return s.wait(ctx, key, true) }

// TryLock takes the exclusive lock on key if it is free, else returns an error matching
// pglock.ErrLocked.
func (s *Session) TryLock(ctx context.Context, key Key) error { return s.try(ctx, key, false) }

// TryRLock takes the shared lock on key if no one holds it exclusively, as TryLock does.
func (s *Session) TryRLock(ctx context.Context, key Key) error { return s.try(ctx, key, true) }

// Unlock releases one hold of the exclusive lock on key; pglock.ErrNotHeld if there is none.
func (s *Session) Unlock(ctx context.Context, key Key) error { return s.unlock(ctx, key, false) }

// RUnlock releases one hold of the shared lock on key; pglock.ErrNotHeld if there is none.
func (s *Session) RUnlock(ctx context.Context, key Key) error { return s.unlock(ctx, key, true) }

// PID is the process id of the session's backend, as pg_locks and pg_stat_activity show it.
func (s *Session) PID() uint32 { return s.conn.Conn().PgConn().PID() }

// Lost is closed once the session's connection is lost, and with it every lock it held.
func (s *Session) Lost() <-chan struct{} { return s.lostCtx.Done() }

// Err returns nil while the session is alive, and once it is lost an error matching
// pglock.ErrLockLost that says why.
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
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
		return lockID{}, fmt.Errorf("pglock: %s: %w", key, pglock.ErrClosed)
	case s.lostCtx.Err() != nil:
		s.mu.Unlock()
		return lockID{}, s.Err()
	}
	return id, nil
}

// named registers key when the session registers names. Called with mu held.
func (s *Session) named(ctx context.Context, key Key) error {
	if !s.cfg.RegisterNames {
		return nil
	}
	return register(ctx, s.pool, s.queries, key)
}

func (s *Session) try(ctx context.Context, key Key, shared bool) error {
	id, err := s.begin(key, shared)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.named(ctx, key); err != nil {
		return err
	}
	acquired, err := s.queries.AdvisoryTryLock(ctx, db.AdvisoryTryLockParams(id.params()))
	if err != nil {
		return s.failed(key, err)
	}
	if !acquired {
		return fmt.Errorf("pglock: %s: %w", key, pglock.ErrLocked)
	}
	s.held[id]++
	return nil
}

// wait runs the blocking lock without a context, so that ctx ending does not close the
// connection (and lose every other lock on it), and cancels it on the server instead.
func (s *Session) wait(ctx context.Context, key Key, shared bool) error {
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
	pgConn := s.conn.Conn().PgConn()
	stop := context.AfterFunc(ctx, func() { pgConn.CancelRequest(context.Background()) })
	err = s.queries.AdvisoryLock(context.Background(), id.params())
	if !stop() { // the cancel request was sent: it may yet land on a later statement
		s.absorbCancel()
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		s.held[id]++ // granted, even if ctx ended meanwhile
		return nil
	case ctx.Err() != nil && errors.As(err, &pgErr) && pgErr.Code == "57014": // query_canceled
		return waitError(ctx, key)
	}
	return s.failed(key, err)
}

// absorbCancel runs statements until one is not canceled: a cancel request that arrived after
// its statement finished interrupts the next one, and that must not be an Unlock.
func (s *Session) absorbCancel() {
	for range 3 {
		err := s.queries.SessionPing(context.Background())
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
			return
		}
	}
}

func waitError(ctx context.Context, key Key) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("pglock: %s: %w: %w", key, pglock.ErrLockTimeout, context.Cause(ctx))
	}
	return fmt.Errorf("pglock: %s: %w", key, context.Cause(ctx))
}

func (s *Session) unlock(ctx context.Context, key Key, shared bool) error {
	id, err := s.begin(key, shared)
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.held[id] == 0 {
		return fmt.Errorf("pglock: %s: %w", key, pglock.ErrNotHeld)
	}
	released, err := s.queries.AdvisoryUnlock(ctx, db.AdvisoryUnlockParams(id.params()))
	if err != nil {
		return s.failed(key, err) // unsure whether it still holds the lock: the session goes
	}
	if !released { // PostgreSQL disagrees with our count: trust nothing on this connection
		return s.failed(key, fmt.Errorf("%w: PostgreSQL says the session did not hold it", pglock.ErrNotHeld))
	}
	if s.held[id]--; s.held[id] == 0 {
		delete(s.held, id)
	}
	return nil
}

// failed ends a session whose connection failed, or whose state is unknown: it is closed (so
// PostgreSQL frees whatever it held) and the session is lost. Called with mu held.
func (s *Session) failed(key Key, err error) error {
	err = fmt.Errorf("pglock: %s: %w", key, err)
	s.lose(err)
	return err
}

func (s *Session) lose(cause error) {
	if s.lostCtx.Err() != nil {
		return
	}
	s.markLost(fmt.Errorf("%w: advisory session: %w", pglock.ErrLockLost, cause))
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
			pingCtx, cancel := context.WithTimeout(ctx, s.cfg.HealthCheckInterval)
			if err := s.queries.SessionPing(pingCtx); err != nil && ctx.Err() == nil {
				s.lose(fmt.Errorf("health check: %w", err))
			}
			cancel()
		}
		s.mu.Unlock()
	}
}
