package notify_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/notify"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// recorder is a subscriber that records what it is told.
type recorder struct {
	payloads  chan string
	listening chan struct{}
}

func newRecorder() *recorder {
	return &recorder{payloads: make(chan string, 100), listening: make(chan struct{}, 100)}
}

func (r *recorder) handler() notify.Handler {
	return notify.Handler{
		Notify:    func(p string) { r.payloads <- p },
		Listening: func() { r.listening <- struct{}{} },
	}
}

func poolNamed(t *testing.T, d *testdb.DB, app string) *pgxpool.Pool {
	return d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
}

// listenerBackends returns the pids of the backends of app that listen (their last statement a
// LISTEN or UNLISTEN).
func listenerBackends(t *testing.T, pool *pgxpool.Pool, app string) []int32 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND query ~ '^(UN)?LISTEN '`, app)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	return pids
}

func notifyOn(t *testing.T, pool *pgxpool.Pool, channel, payload string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload)
	require.NoError(t, err)
}

// A Locker waiting for a lock and two other subscribers on the same pool share one listener
// connection; once all have gone, it is closed.
func TestOneListenerConnectionPerPool(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := poolNamed(t, d, "shared")
	ctx := context.Background()

	locker, err := tablelock.New(pool, nil)
	require.NoError(t, err)
	defer locker.Close(ctx)
	held, err := locker.TryAcquire(ctx, "l", nil)
	require.NoError(t, err)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := locker.Acquire(waitCtx, "l", nil); waited <- err }()

	cron, leader := newRecorder(), newRecorder()
	stopCron := notify.Subscribe(pool, nil, nil, "cron_channel", cron.handler())
	stopLeader := notify.Subscribe(pool, nil, nil, "leader_channel", leader.handler())
	testdb.Receive(t, cron.listening)
	testdb.Receive(t, leader.listening)
	notifyOn(t, d.Pool, "cron_channel", "tick")
	require.Equal(t, "tick", testdb.Receive(t, cron.payloads))
	testdb.WaitFor(t, func() bool { return locker.Stats().Waiting == 1 })
	require.Len(t, listenerBackends(t, d.Pool, "shared"), 1, "three subscribers, one listening connection")
	// A second listener, had one been made, would have connected within half a second.
	for until := time.Now().Add(500 * time.Millisecond); time.Now().Before(until); time.Sleep(20 * time.Millisecond) {
		var backends int32
		require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'shared'`).Scan(&backends))
		require.Equal(t, pool.Stat().TotalConns()+1, backends, "every connection of the app is the pool's but one")
	}

	stopWaiting()
	require.ErrorIs(t, <-waited, context.Canceled)
	require.NoError(t, held.Release(ctx))
	require.NoError(t, locker.Close(ctx))
	stopCron()
	require.Len(t, listenerBackends(t, d.Pool, "shared"), 1, "one subscriber is left")
	stopLeader()
	testdb.WaitFor(t, func() bool { return len(listenerBackends(t, d.Pool, "shared")) == 0 }, "the last unsubscribe closes the connection")
}

// After its backend is terminated, the listener reconnects, tells every subscriber (who must
// poll: what was sent meanwhile is lost), and delivers again.
func TestListenerReconnectsAndTellsSubscribers(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := poolNamed(t, d, "reconnects")
	a, b := newRecorder(), newRecorder()
	defer notify.Subscribe(pool, nil, nil, "a", a.handler())()
	defer notify.Subscribe(pool, nil, nil, "b", b.handler())()
	testdb.Receive(t, a.listening)
	testdb.Receive(t, b.listening)

	for round := range 2 {
		pids := listenerBackends(t, d.Pool, "reconnects")
		require.Len(t, pids, 1)
		var terminated bool
		require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", pids[0]).Scan(&terminated))
		require.True(t, terminated)
		testdb.Receive(t, a.listening)
		testdb.Receive(t, b.listening)
		notifyOn(t, d.Pool, "a", "after reconnect")
		notifyOn(t, d.Pool, "b", "to b")
		require.Equal(t, "after reconnect", testdb.Receive(t, a.payloads), "round %d", round)
		require.Equal(t, "to b", testdb.Receive(t, b.payloads))
		require.NotEqual(t, pids, listenerBackends(t, d.Pool, "reconnects"), "a new connection")
	}
}

// Channels come and go on the one connection: a channel no one subscribes to any more is
// UNLISTENed, and a new one is LISTENed without a reconnect.
func TestSubscribeAndUnsubscribePerChannel(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := poolNamed(t, d, "channels")
	a, a2, b := newRecorder(), newRecorder(), newRecorder()
	defer notify.Subscribe(pool, nil, nil, "a", a.handler())()
	testdb.Receive(t, a.listening)
	pids := listenerBackends(t, d.Pool, "channels")

	stopA2 := notify.Subscribe(pool, nil, nil, "a", a2.handler())
	testdb.Receive(t, a2.listening)
	stopB := notify.Subscribe(pool, nil, nil, "b", b.handler())
	testdb.Receive(t, b.listening)
	require.Empty(t, a.listening, "a newcomer is told, not the others")
	notifyOn(t, d.Pool, "a", "1")
	require.Equal(t, "1", testdb.Receive(t, a.payloads))
	require.Equal(t, "1", testdb.Receive(t, a2.payloads))

	stopA2()
	stopB()
	notifyOn(t, d.Pool, "b", "unheard")
	notifyOn(t, d.Pool, "a", "2")
	require.Equal(t, "2", testdb.Receive(t, a.payloads))
	require.Empty(t, a2.payloads)
	require.Empty(t, b.payloads)
	require.Equal(t, pids, listenerBackends(t, d.Pool, "channels"), "the same connection throughout")
	testdb.WaitFor(t, func() bool {
		var last string
		require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT query FROM pg_stat_activity WHERE pid = $1", pids[0]).Scan(&last))
		return last == `UNLISTEN "b"`
	}, "b, which no one listens to any more, is unlistened")
}

// With a connection configuration of its own, the listener connects there (here: the same
// server under another application name), not as the pool does, even when the pool already has
// a listener of its own and the configuration prints as the pool's does.
func TestListenerConnectsWhereItIsTold(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := poolNamed(t, d, "through-bouncer")
	plain := newRecorder()
	defer notify.Subscribe(pool, nil, nil, "c", plain.handler())()
	testdb.Receive(t, plain.listening)

	direct, err := pgx.ParseConfig(pool.Config().ConnConfig.ConnString())
	require.NoError(t, err)
	direct.RuntimeParams["application_name"] = "direct"
	r := newRecorder()
	defer notify.Subscribe(pool, direct, nil, "c", r.handler())()
	testdb.Receive(t, r.listening)
	require.Len(t, listenerBackends(t, d.Pool, "direct"), 1)
	require.Len(t, listenerBackends(t, d.Pool, "through-bouncer"), 1, "the pool's own, for the first subscriber")
	notifyOn(t, d.Pool, "c", "x")
	require.Equal(t, "x", testdb.Receive(t, r.payloads))
	require.Equal(t, "x", testdb.Receive(t, plain.payloads))
}

// A pool that handles notifications itself (ConnConfig.OnNotification) does not take them
// from the listener, and a configuration pgx cannot use is an error the listener retries, not
// a crash; either way, unsubscribing returns.
func TestListenerSurvivesConfigurationsOfItsOwners(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.OnNotification = func(*pgconn.PgConn, *pgconn.Notification) {}
	})
	r := newRecorder()
	unsubscribe := notify.Subscribe(pool, nil, nil, "c", r.handler())
	testdb.Receive(t, r.listening)
	notifyOn(t, d.Pool, "c", "delivered")
	require.Equal(t, "delivered", testdb.Receive(t, r.payloads))
	unsubscribe()

	handMade := newRecorder()
	notify.Subscribe(pool, &pgx.ConnConfig{}, slog.New(slog.DiscardHandler), "c", handMade.handler())()
	require.Empty(t, handMade.listening)
}
