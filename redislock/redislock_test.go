package redislock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/locktest"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/internal/testredis"
	"github.com/pglock/pglock/redislock"
)

// TestMain starts the servers the examples use (REDIS_ADDR, REDLOCK_ADDRS), and fails a run
// that leaked goroutines. Without redis-server nothing here can run: it says so in one line and
// passes, except under CI=true, where it fails (as the PgBouncer and Patroni tests do).
func TestMain(m *testing.M) {
	var servers []*testredis.Server
	var addrs []string
	for range 4 {
		s, err := testredis.Start(context.Background(), nil)
		if errors.Is(err, testredis.ErrNotInstalled) && os.Getenv("CI") != "true" {
			fmt.Fprintf(os.Stderr, "redislock: skipped: %v\n", err)
			os.Exit(0)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	os.Setenv("REDIS_ADDR", addrs[0])
	os.Setenv("REDLOCK_ADDRS", strings.Join(addrs[1:], " "))
	code := m.Run()
	for _, s := range servers {
		s.Remove()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// client returns a client of addr, closed when t ends.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// prefixes gives each New of a suite a fresh set of locks on shared servers.
var prefixes atomic.Int64

func freshPrefix() string {
	return "t" + strings.Repeat("x", int(prefixes.Add(1)%3)) + time.Now().Format("150405.000000")
}

func newLocker(t *testing.T, c redis.UniversalClient, opts *redislock.Options) *redislock.Locker {
	l, err := redislock.New(c, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	return l
}

func newRedlock(t *testing.T, clients []redis.UniversalClient, opts *redislock.Options) *redislock.Redlock {
	// A test's first command to a node dials it: under -race on a busy machine that can take
	// longer than DefaultNodeTimeout, which bounds an answer on a connection already open.
	withTimeout := redislock.Options{NodeTimeout: testNodeTimeout}
	if opts != nil {
		withTimeout = *opts
		withTimeout.NodeTimeout = cmp.Or(opts.NodeTimeout, testNodeTimeout)
	}
	r, err := redislock.NewRedlock(clients, &withTimeout)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close(context.Background())) })
	return r
}

// testNodeTimeout is the tests' Redlock NodeTimeout.
const testNodeTimeout = 500 * time.Millisecond

// Leases of the tests that hold locks a while: renewed every third of a second (a force
// release is noticed as soon), with seconds of room, so that a busy machine slows renewals
// without losing locks.
const roomyTTL, heartbeat = 5 * time.Second, 333 * time.Millisecond

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	var lockers sync.Map // each subtest's first Locker
	locktest.Run(t, locktest.Subject{
		Capabilities: locktest.Capabilities{Fencing: true, DurableFencing: true, Fairness: true, LossSignal: true},
		New: func(t *testing.T) (pglock.Locker, pglock.Locker) {
			opts := &redislock.Options{TTL: roomyTTL, HeartbeatInterval: heartbeat, Prefix: freshPrefix()}
			a, b := newLocker(t, client(t, srv.Addr()), opts), newLocker(t, client(t, srv.Addr()), opts)
			lockers.Store(t, a)
			return a.AsLocker(), b.AsLocker()
		},
		ForceRelease: func(t *testing.T, name string) {
			l, _ := lockers.Load(t)
			held, err := l.(*redislock.Locker).ForceRelease(context.Background(), name)
			require.NoError(t, err)
			require.True(t, held)
		},
		Waiting: func(t *testing.T, name string) int {
			l, _ := lockers.Load(t)
			n, err := l.(*redislock.Locker).Waiting(context.Background(), name)
			require.NoError(t, err)
			return n
		},
		// Durable: appendonly yes, appendfsync always, as docs/redis.md requires of tokens.
		NewRestartable: func(t *testing.T) (pglock.Locker, func()) {
			durable := testredis.New(t, &testredis.Options{Durable: true})
			l := newLocker(t, client(t, durable.Addr()), &redislock.Options{TTL: time.Second})
			return l.AsLocker(), func() { require.NoError(t, durable.Restart(context.Background())) }
		},
	})
}

// nodes starts n Redis servers, each with nothing on disk (a restarted one is empty).
func nodes(t *testing.T, n int) ([]*testredis.Server, []redis.UniversalClient) {
	servers := make([]*testredis.Server, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i] = testredis.New(t, nil) })
	}
	wg.Wait()
	return servers, clients(t, servers)
}

func clients(t *testing.T, servers []*testredis.Server) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(servers))
	for i, s := range servers {
		cs[i] = client(t, s.Addr())
	}
	return cs
}

func TestRedlockConformance(t *testing.T) {
	t.Parallel()
	servers, _ := nodes(t, 3)
	var lockers sync.Map
	locktest.Run(t, locktest.Subject{
		// No fencing token and no order of service; a loss is signalled.
		Capabilities: locktest.Capabilities{LossSignal: true},
		New: func(t *testing.T) (pglock.Locker, pglock.Locker) {
			opts := &redislock.Options{TTL: roomyTTL, HeartbeatInterval: heartbeat, Prefix: freshPrefix()}
			a, b := newRedlock(t, clients(t, servers), opts), newRedlock(t, clients(t, servers), opts)
			lockers.Store(t, a)
			return a.AsLocker(), b.AsLocker()
		},
		ForceRelease: func(t *testing.T, name string) {
			l, _ := lockers.Load(t)
			held, err := l.(*redislock.Redlock).ForceRelease(context.Background(), name)
			require.NoError(t, err)
			require.True(t, held)
		},
	})
}

// Five nodes; four instances take one name in turns while one node is killed and, a TTL later
// (the Redlock author's delayed restart), started again empty: nobody is ever inside with
// another, and a long holder keeps its lock (its renewals set it again on the emptied node).
func TestRedlockHoldsThroughANodeRestartedEmpty(t *testing.T) {
	t.Parallel()
	servers, _ := nodes(t, 5)
	// Renewed every third of a second, with seconds of room: a busy machine slows the rounds
	// of five nodes, it does not cost the long holder its lock.
	opts := &redislock.Options{TTL: roomyTTL, HeartbeatInterval: heartbeat, Prefix: "restart"}
	instances := make([]*redislock.Redlock, 4)
	for i := range instances {
		instances[i] = newRedlock(t, clients(t, servers), opts)
	}
	ctx := context.Background()

	// A long holder: the restart must not cost it the lock.
	long, err := instances[0].Acquire(ctx, "long")
	require.NoError(t, err)

	var inside, entered atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range instances {
		for range 3 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					err := r.WithLock(ctx, "shared", func(ctx context.Context) error {
						if n := inside.Add(1); n != 1 {
							t.Errorf("instance %d found %d holders inside", i, n)
						}
						entered.Add(1)
						time.Sleep(2 * time.Millisecond)
						inside.Add(-1)
						return nil
					})
					assert.NoError(t, err)
				}
			})
		}
	}
	testdb.WaitFor(t, func() bool { return entered.Load() >= 20 }, "the instances take turns")
	require.NoError(t, servers[2].Kill())
	downAt := entered.Load()
	testdb.WaitFor(t, func() bool { return entered.Load() >= downAt+20 }, "turns go on with a node down")
	time.Sleep(opts.TTL) // what the node had expires before it comes back
	require.NoError(t, servers[2].Start(ctx))
	before := entered.Load()
	// Renewed (every third of a second) on the emptied node too: the long holder's key is back.
	probe := client(t, servers[2].Addr())
	testdb.WaitFor(t, func() bool {
		return probe.Exists(ctx, "{restart:long}:lock").Val() == 1
	}, "the emptied node holds the long lock again")
	testdb.WaitFor(t, func() bool { return entered.Load() >= before+20 }, "turns go on after the restart")
	close(stop)
	wg.Wait()
	require.NoError(t, long.Err(), "the restart cost the holder nothing")
	_, err = instances[1].TryAcquire(ctx, "long")
	require.ErrorIs(t, err, pglock.ErrLocked)
	require.NoError(t, long.Release(ctx))
}

// held is what the loss tests read of a Lock or a RedlockLock.
type held interface {
	Lost() <-chan struct{}
	Err() error
	Deadline() time.Time
	Release(ctx context.Context) error
}

// With its server killed (a Locker), or a majority of its nodes (a Redlock), a lock's renewals
// fail: its holder is told at the TTL (the validity) less the safety margin, counted from the
// last renewal that got through, sent before the kill: before Redis could expire the key.
func TestLossOfTheStoreIsSignalledAtTheDeadline(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		nodes  int
		killed int
	}{
		{"Locker", 1, 1},
		{"Redlock", 3, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			servers, cs := nodes(t, tt.nodes)
			opts := &redislock.Options{TTL: time.Second}
			ctx := context.Background()
			var lk held
			var err error
			if tt.nodes == 1 {
				lk, err = newLocker(t, cs[0], opts).Acquire(ctx, "x")
			} else {
				lk, err = newRedlock(t, cs, opts).Acquire(ctx, "x")
			}
			require.NoError(t, err)
			killedAt := time.Now()
			for _, s := range servers[:tt.killed] {
				require.NoError(t, s.Kill())
			}
			testdb.Receive(t, lk.Lost())
			require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
			require.Equal(t, pglock.CauseRenewalFailed, pglock.CauseOf(lk.Err()))
			require.False(t, lk.Deadline().After(killedAt.Add(900*time.Millisecond)), "deadline %s, killed %s", lk.Deadline(), killedAt)
			require.False(t, time.Now().Before(lk.Deadline()), "not declared lost before its deadline")
			require.ErrorIs(t, lk.Release(ctx), pglock.ErrLockLost)
		})
	}
}

// Why tokens are documented as durable only with appendfsync always: a server that lost its
// data starts the counter over, and a token repeats.
func TestTokensStartOverOnAServerThatLostItsData(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	l := newLocker(t, client(t, srv.Addr()), &redislock.Options{TTL: time.Second})
	ctx := context.Background()
	var last int64
	for range 3 {
		lk, err := l.Acquire(ctx, "x")
		require.NoError(t, err)
		last = lk.Token()
		require.NoError(t, lk.Release(ctx))
	}
	require.NoError(t, srv.Restart(ctx))
	var lk *redislock.Lock
	testdb.WaitFor(t, func() bool {
		var err error
		lk, err = l.TryAcquire(ctx, "x")
		return err == nil
	})
	require.LessOrEqual(t, lk.Token(), last, "the token repeats")
	require.NoError(t, lk.Release(ctx))
}

// A waiter that stops keeping its place (its process died) holds the queue up for no longer
// than its place lasts: three MaxPollIntervals.
func TestADeadWaiterLeavesTheQueue(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	opts := &redislock.Options{TTL: roomyTTL, HeartbeatInterval: heartbeat, MaxPollInterval: 100 * time.Millisecond}
	holderLocker := newLocker(t, client(t, srv.Addr()), opts)
	ctx := context.Background()
	held, err := holderLocker.Acquire(ctx, "x")
	require.NoError(t, err)

	// The dead waiter: an Acquire in a Locker closed while it waits (its polls stop, as a
	// killed process's do; Close does not take it out of the queue).
	dying, err := redislock.New(client(t, srv.Addr()), opts)
	require.NoError(t, err)
	gone := make(chan error, 1)
	go func() {
		_, err := dying.Acquire(ctx, "x")
		gone <- err
	}()
	testdb.WaitFor(t, func() bool { n, _ := holderLocker.Waiting(ctx, "x"); return n == 1 })
	live := make(chan *redislock.Lock, 1)
	go func() {
		lk, err := holderLocker.Acquire(ctx, "x")
		assert.NoError(t, err)
		live <- lk
	}()
	testdb.WaitFor(t, func() bool { n, _ := holderLocker.Waiting(ctx, "x"); return n == 2 })
	require.NoError(t, dying.Close(ctx))
	require.ErrorIs(t, testdb.Receive(t, gone), pglock.ErrClosed)

	require.NoError(t, held.Release(ctx)) // wakes the dead waiter, which never comes
	lk := testdb.Receive(t, live)
	require.Greater(t, lk.Token(), held.Token())
	require.NoError(t, lk.Release(ctx))
}

func TestHolderShowsWhoHoldsALock(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	l := newLocker(t, client(t, srv.Addr()), &redislock.Options{AppName: "billing", Metadata: map[string]any{"job": "invoices"}})
	ctx := context.Background()
	_, err := l.Holder(ctx, "x")
	require.ErrorIs(t, err, pglock.ErrNotFound)
	lk, err := l.Acquire(ctx, "x")
	require.NoError(t, err)
	h, err := l.Holder(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, lk.Token(), h.Token)
	require.True(t, strings.HasPrefix(h.Instance, "billing@"), h.Instance)
	require.Equal(t, map[string]any{"job": "invoices"}, h.Metadata)
	require.InDelta(t, redislock.DefaultTTL, h.ExpiresIn, float64(2*time.Second))
	require.WithinDuration(t, time.Now(), h.AcquiredAt, 5*time.Second)
	require.NoError(t, lk.Release(ctx))
	_, err = l.Holder(ctx, "x")
	require.ErrorIs(t, err, pglock.ErrNotFound)
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	c := client(t, srv.Addr())
	others := []redis.UniversalClient{client(t, testredis.New(t, nil).Addr()), client(t, testredis.New(t, nil).Addr())}
	var typedNil *redis.Client
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		opts *redislock.Options
		want error
	}{
		{"negative TTL", &redislock.Options{TTL: -time.Second}, pglock.ErrInvalidTTL},
		{"TTL below the minimum", &redislock.Options{TTL: time.Millisecond}, pglock.ErrInvalidTTL},
		{"negative margin", &redislock.Options{SafetyMargin: -1}, pglock.ErrInvalidArgument},
		{"a heartbeat under a millisecond", &redislock.Options{HeartbeatInterval: time.Microsecond}, pglock.ErrInvalidArgument},
		{"margin leaving no room", &redislock.Options{TTL: time.Second, SafetyMargin: time.Second}, pglock.ErrInvalidTTL},
		{"braces in the prefix", &redislock.Options{Prefix: "a{b}"}, pglock.ErrInvalidArgument},
		{"negative poll interval", &redislock.Options{MaxPollInterval: -1}, pglock.ErrInvalidArgument},
		{"poll interval below the minimum", &redislock.Options{MaxPollInterval: time.Millisecond}, pglock.ErrInvalidArgument},
		{"a colon in the prefix", &redislock.Options{Prefix: "app:tenant"}, pglock.ErrInvalidArgument},
		{"metadata that is not JSON", &redislock.Options{Metadata: map[string]any{"f": func() {}}}, pglock.ErrInvalidArgument},
	} {
		_, err := redislock.New(c, tt.opts)
		require.ErrorIs(t, err, tt.want, tt.name)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, tt.name)
		_, err = redislock.NewRedlock(append([]redis.UniversalClient{c}, others...), tt.opts)
		require.ErrorIs(t, err, tt.want, "Redlock: "+tt.name)
	}
	for _, cs := range [][]redis.UniversalClient{nil, {c}, {c, others[0]}, append([]redis.UniversalClient{c, c}, others...)} {
		_, err := redislock.NewRedlock(cs, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, "%d nodes", len(cs))
	}
	_, err := redislock.NewRedlock([]redis.UniversalClient{c, client(t, srv.Addr()), others[0]}, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument, "two clients of one server are one node")
	_, err = redislock.NewRedlock([]redis.UniversalClient{c, nil, others[0]}, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument, "a nil node")
	_, err = redislock.NewRedlock([]redis.UniversalClient{c, typedNil, others[0]}, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument, "a nil *redis.Client node")
	_, err = redislock.NewRedlock([]redis.UniversalClient{c, c, c}, &redislock.Options{TTL: time.Second, SafetyMargin: time.Millisecond})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = redislock.New(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = redislock.New(typedNil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)

	l := newLocker(t, c, nil)
	r := newRedlock(t, append([]redis.UniversalClient{c}, others...), nil)
	for _, name := range []string{"", strings.Repeat("n", pglock.MaxNameLen+1), "nul\x00", "\xff"} {
		_, err := l.TryAcquire(ctx, name)
		require.ErrorIs(t, err, pglock.ErrInvalidName)
		_, err = l.Acquire(ctx, name)
		require.ErrorIs(t, err, pglock.ErrInvalidName)
		require.ErrorIs(t, l.WithLock(ctx, name, func(context.Context) error { return nil }), pglock.ErrInvalidName)
		_, err = l.ForceRelease(ctx, name)
		require.ErrorIs(t, err, pglock.ErrInvalidName)
		_, err = r.TryAcquire(ctx, name)
		require.ErrorIs(t, err, pglock.ErrInvalidName)
		_, err = r.Acquire(ctx, name)
		require.ErrorIs(t, err, pglock.ErrInvalidName)
	}
	for _, node := range append([]redis.UniversalClient{c}, others...) {
		require.Zero(t, node.DBSize(ctx).Val(), "nothing written")
	}
}

// A Redlock lock has no fencing token: its own type has no Token method at all, and through
// pglock.Lock, Token panics with an error matching pglock.ErrNoFencingToken.
func TestRedlockHasNoFencingToken(t *testing.T) {
	t.Parallel()
	_, cs := nodes(t, 3)
	r := newRedlock(t, cs, nil)
	ctx := context.Background()
	lk, err := r.AsLocker().TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.PanicsWithError(t, "pglock: this lock has no fencing token: \"x\" is a Redlock lock; Redlock's nodes cannot agree on a number "+
		"that only grows, so nothing it returned could fence a write (docs/redis.md)", func() { lk.Token() })
	_, ok := any(&redislock.RedlockLock{}).(interface{ Token() int64 })
	require.False(t, ok)
	require.NoError(t, lk.Release(ctx))
}

// Close ends a wait under way with pglock.ErrClosed, and takes its place out of the queue before
// it returns: a graceful shutdown holds nobody up.
func TestCloseTakesItsWaitersOutOfTheQueue(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	l := newLocker(t, client(t, srv.Addr()), nil)
	closing, err := redislock.New(client(t, srv.Addr()), nil)
	require.NoError(t, err)
	ctx := context.Background()
	held, err := l.Acquire(ctx, "x")
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := closing.Acquire(ctx, "x")
		waited <- err
	}()
	testdb.WaitFor(t, func() bool { n, _ := l.Waiting(ctx, "x"); return n == 1 })
	require.NoError(t, closing.Close(ctx))
	require.ErrorIs(t, testdb.Receive(t, waited), pglock.ErrClosed)
	n, err := l.Waiting(ctx, "x")
	require.NoError(t, err)
	require.Zero(t, n, "the closed Locker's waiter left the queue")
	_, err = closing.TryAcquire(ctx, "y")
	require.ErrorIs(t, err, pglock.ErrClosed)
	require.NoError(t, held.Release(ctx))
}

// dropper relays connections to a Redis server, and can drop the answer to the next request:
// the request reaches the server, then the connection is cut before its answer comes back.
type dropper struct {
	listener net.Listener
	armed    atomic.Bool
	wg       sync.WaitGroup
}

func newDropper(t *testing.T, upstream string) *dropper {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	d := &dropper{listener: l}
	d.wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				conn.Close()
				continue
			}
			var cut atomic.Bool // the answers on this connection are dropped from now on
			d.wg.Go(func() {
				defer conn.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if err != nil || cut.Load() {
						return
					}
					if _, err := conn.Write(buf[:n]); err != nil {
						return
					}
				}
			})
			d.wg.Go(func() {
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := conn.Read(buf)
					if err != nil {
						return
					}
					dropping := d.armed.CompareAndSwap(true, false)
					cut.Store(dropping)
					if _, err := server.Write(buf[:n]); err != nil {
						return
					}
					if dropping {
						time.Sleep(100 * time.Millisecond) // the server has run it
						conn.Close()
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { l.Close(); d.wg.Wait() })
	return d
}

// A release whose answer was lost is sent again by go-redis; the second finds the mark the
// first left, and the release is not taken for a loss.
func TestAReleaseSentAgainAfterItsAnswerWasLostIsNoLoss(t *testing.T) {
	t.Parallel()
	srv := testredis.New(t, nil)
	proxy := newDropper(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: proxy.listener.Addr().String()}) // go-redis's retries
	t.Cleanup(func() { c.Close() })
	l := newLocker(t, c, nil)
	ctx := context.Background()
	warm, err := l.Acquire(ctx, "warm") // the scripts are loaded: the dropped request runs one
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	lk, err := l.Acquire(ctx, "x")
	require.NoError(t, err)
	proxy.armed.Store(true)
	require.NoError(t, lk.Release(ctx))
	require.False(t, proxy.armed.Load(), "the release's answer was dropped")
	require.NoError(t, lk.Err())
	again, err := l.TryAcquire(ctx, "x")
	require.NoError(t, err, "released")
	require.NoError(t, again.Release(ctx))
}
