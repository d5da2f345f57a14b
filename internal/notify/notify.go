// Package notify shares one LISTEN connection per pool among everything in the process that
// listens on that pool: every Locker, scheduler and elector subscribes to the channels it
// needs, and the listener LISTENs on their union. The connection is the listener's own, made
// as the pool makes its connections (through its BeforeConnect and AfterConnect), or from a
// configuration of its own, for a pool that cannot LISTEN (PgBouncer in transaction pooling
// mode). It reconnects with capped backoff, and tells subscribers each time their channel is
// listened to on a new connection: what was sent meanwhile is lost, so they poll once.
package notify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/backoff"
	"github.com/pglock/pglock/internal/clock"
)

// Handler receives one channel's notifications. Both functions run on the listener's
// goroutine: they must return quickly, and must not unsubscribe. A notification read just as
// its subscription ends may still be delivered.
type Handler struct {
	// Notify is called with the payload of each notification on the channel.
	Notify func(payload string)
	// Listening, when set, is called each time the channel is listened to on a connection: the
	// first time, and after every reconnect. Notifications sent before may have been missed.
	Listening func()
}

// Subscribe delivers the notifications of channel on pool to h until the returned function is
// called. direct, when not nil, is where the listener connects instead of the pool's server (it
// must come from pgx.ParseConfig); subscriptions with the same pool and the same direct
// (the same pointer, or both nil) share one connection. The last unsubscribe closes the
// connection and waits for the listener to stop.
func Subscribe(pool *pgxpool.Pool, direct *pgx.ConnConfig, logger *slog.Logger, channel string, h Handler) (unsubscribe func()) {
	k := key{pool: pool, direct: direct}
	registry.mu.Lock()
	l, ok := registry.listeners[k]
	if !ok {
		l = start(k, pool, direct, logger)
		registry.listeners[k] = l
	}
	s := &subscription{channel: channel, h: h}
	l.add(s)
	registry.mu.Unlock()

	var once sync.Once
	return func() { once.Do(func() { l.remove(s) }) }
}

// key names a listener: its pool, and where it connects if not where the pool does. A
// configuration is compared by identity: two that print the same connection string may differ
// in what was set on them afterwards (credentials, TLS, runtime parameters).
type key struct {
	pool   *pgxpool.Pool
	direct *pgx.ConnConfig
}

var registry = struct {
	mu        sync.Mutex
	listeners map[key]*listener
}{listeners: map[key]*listener{}}

type subscription struct {
	channel string
	h       Handler
	told    bool // Listening was called for the current connection; guarded by the listener's mu
}

// listener is one LISTEN connection and the goroutine that reads it.
type listener struct {
	key    key
	pool   *pgxpool.Pool
	direct *pgx.ConnConfig
	logger *slog.Logger
	stop   context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	subs map[string]map[*subscription]struct{} // by channel
	// interrupt ends the wait for a notification on the current connection, so that the loop
	// listens to the channels as they now are; nil while not connected.
	interrupt context.CancelFunc
}

// reconnectBackoff is how the listener waits between attempts to reconnect.
var reconnectBackoff = backoff.Capped{First: 10 * time.Millisecond, Max: 5 * time.Second}

func start(k key, pool *pgxpool.Pool, direct *pgx.ConnConfig, logger *slog.Logger) *listener {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	l := &listener{key: k, pool: pool, direct: direct, logger: logger, stop: stop, done: make(chan struct{}),
		subs: map[string]map[*subscription]struct{}{}}
	go l.run(ctx)
	return l
}

func (l *listener) add(s *subscription) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subs[s.channel] == nil {
		l.subs[s.channel] = map[*subscription]struct{}{}
	}
	l.subs[s.channel][s] = struct{}{}
	l.resync() // to LISTEN on a new channel, and tell the newcomer once it is listened to
}

// remove ends a subscription; the last one stops the listener and waits for it.
func (l *listener) remove(s *subscription) {
	registry.mu.Lock()
	l.mu.Lock()
	delete(l.subs[s.channel], s)
	if len(l.subs[s.channel]) == 0 {
		delete(l.subs, s.channel)
		l.resync()
	}
	last := len(l.subs) == 0
	if last {
		delete(registry.listeners, l.key)
	}
	l.mu.Unlock()
	registry.mu.Unlock()
	if last {
		l.stop()
		<-l.done
	}
}

// resync has the loop listen to the channels as they now are. Called with mu held.
func (l *listener) resync() {
	if l.interrupt != nil {
		l.interrupt()
	}
}

// run keeps a connection listening until the listener stops, reconnecting with backoff.
func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	failures := 0
	for {
		start := time.Now()
		listened, err := l.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened && time.Since(start) > reconnectBackoff.Max {
			failures = 0 // it stayed up: a connection killed at once keeps backing off
		}
		failures++
		l.logger.Warn("pglock: listener disconnected; reconnecting", "error", err)
		if !reconnectBackoff.Sleep(ctx, clock.Real, failures) {
			return
		}
	}
}

// listenOnce connects, then listens and delivers notifications until the connection fails or
// the listener stops; listened reports whether it got as far as listening.
func (l *listener) listenOnce(ctx context.Context) (listened bool, err error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	defer func() {
		l.mu.Lock()
		l.interrupt = nil
		l.mu.Unlock()
	}()
	channels := map[string]bool{} // listened to on this connection
	l.mu.Lock()
	for _, subs := range l.subs {
		for s := range subs {
			s.told = false
		}
	}
	l.mu.Unlock()
	for {
		waitCtx, interrupt := context.WithCancel(ctx)
		l.mu.Lock()
		l.interrupt = interrupt // set before reading the channels: a change from now on interrupts
		wanted := map[string]bool{}
		for channel := range l.subs {
			wanted[channel] = true
		}
		l.mu.Unlock()
		if err := listenTo(ctx, conn, channels, wanted); err != nil {
			interrupt()
			return listened, err
		}
		listened = true
		l.tellListening(channels)
		for {
			n, err := conn.WaitForNotification(waitCtx)
			if err == nil && n == nil {
				continue
			}
			if err != nil {
				interrupt()
				if ctx.Err() == nil && waitCtx.Err() != nil && !conn.IsClosed() {
					break // the channels changed: listen anew on the same connection
				}
				return listened, err
			}
			l.dispatch(n)
		}
	}
}

// connect opens the listener's own connection, not one of the pool's (it would take a slot
// for good): made as the pool makes its own (a BeforeConnect may supply credentials, an
// AfterConnect set the session up), or from the direct configuration.
func (l *listener) connect(ctx context.Context) (conn *pgx.Conn, err error) {
	defer func() {
		if p := recover(); p != nil { // pgx panics on a configuration not made by ParseConfig
			conn, err = nil, fmt.Errorf("pglock: listener configuration: %v", p)
		}
	}()
	var config *pgx.ConnConfig
	var poolConfig *pgxpool.Config
	if l.direct != nil {
		config = l.direct.Copy()
	} else {
		poolConfig = l.pool.Config()
		config = poolConfig.ConnConfig
		if poolConfig.BeforeConnect != nil {
			if err := poolConfig.BeforeConnect(ctx, config); err != nil {
				return nil, err
			}
		}
	}
	// Interrupting a wait must leave the connection usable: a deadline does, while a cancel
	// request (a pool's own choice, perhaps) could land on the next LISTEN instead.
	config.BuildContextWatcherHandler = func(pgConn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pgConn.Conn()}
	}
	// A handler of the pool's own would take the notifications, and WaitForNotification would
	// return none.
	config.OnNotification = nil
	conn, err = pgx.ConnectConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	if poolConfig != nil && poolConfig.AfterConnect != nil {
		if err := poolConfig.AfterConnect(ctx, conn); err != nil {
			conn.Close(context.Background())
			return nil, err
		}
	}
	return conn, nil
}

// listenTo LISTENs to the wanted channels and UNLISTENs the others. A channel is an identifier,
// which no statement can take as a parameter: hence SQL built here, quoted by pgx.
func listenTo(ctx context.Context, conn *pgx.Conn, listening, wanted map[string]bool) error {
	for channel := range wanted {
		if !listening[channel] {
			if err := conn.PgConn().Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()).Close(); err != nil {
				return err
			}
			listening[channel] = true
		}
	}
	for channel := range listening {
		if !wanted[channel] {
			if err := conn.PgConn().Exec(ctx, "UNLISTEN "+pgx.Identifier{channel}.Sanitize()).Close(); err != nil {
				return err
			}
			delete(listening, channel)
		}
	}
	return nil
}

// tellListening calls Listening for every subscription not yet told since the connection was
// made, on the channels listened to.
func (l *listener) tellListening(listening map[string]bool) {
	var tell []func()
	l.mu.Lock()
	for channel := range listening {
		for s := range l.subs[channel] {
			if !s.told {
				s.told = true
				if s.h.Listening != nil {
					tell = append(tell, s.h.Listening)
				}
			}
		}
	}
	l.mu.Unlock()
	for _, f := range tell {
		f()
	}
}

// dispatch hands a notification to its channel's subscribers.
func (l *listener) dispatch(n *pgconn.Notification) {
	var notify []func(string)
	l.mu.Lock()
	for s := range l.subs[n.Channel] {
		if s.h.Notify != nil {
			notify = append(notify, s.h.Notify)
		}
	}
	l.mu.Unlock()
	for _, f := range notify {
		f(n.Payload)
	}
}
