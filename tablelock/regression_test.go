package tablelock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/tablelock"
)

// Close gives away the locks it holds, so their users are told first: a WithLock function's
// context is canceled, with a cause matching ErrLockLost and ErrClosed.
func TestCloseDeclaresLocksInUseLost(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l, err := tablelock.New(d.Pool, &tablelock.Config{AppName: "x"})
	require.NoError(t, err)
	other := newLocker(t, d.Pool, nil)
	inFn, finish, done := make(chan context.Context), make(chan struct{}), make(chan error)
	go func() {
		done <- l.WithLock(ctx, "r1", nil, func(fctx context.Context) error { inFn <- fctx; <-finish; return nil })
	}()
	fctx := <-inFn
	require.NoError(t, l.Close(ctx))
	lk2, err := other.TryAcquire(ctx, "r1", nil)
	require.NoError(t, err) // another instance holds it now
	defer lk2.Release(ctx)
	live := fctx.Err() == nil
	close(finish)
	err = <-done
	require.False(t, live, "fn's context still live although Close gave the lock away")
	require.ErrorIs(t, context.Cause(fctx), pglock.ErrLockLost)
	require.ErrorIs(t, context.Cause(fctx), pglock.ErrClosed)
	require.ErrorIs(t, err, pglock.ErrLockLost, "WithLock reports it")
}

// Close does not wait for a try that the server holds up: the try returns ErrClosed at once.
// (What the server does with it later is given back, unless it overtakes the give-back: then
// the lock waits out its TTL, as for a try whose ctx ends on the wire.) The connection it cut
// off is pgx's to close, under a deadline of pgx's own that the try must leave in place: else
// a connection whose cancel request cannot get through stays open as long as the server keeps
// the query running.
func TestCloseCutsOffATryUnderWay(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	pool, firstConn := singleConnPool(t, d, func(c *pgxpool.Config) {
		// pgx closes a cut-off connection in the background; the try, held up on its way back,
		// runs after that has set its deadline.
		c.ConnConfig.Tracer = afterQuery(func(data pgx.TraceQueryEndData) {
			if data.Err != nil {
				time.Sleep(50 * time.Millisecond)
			}
		})
	})
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "x"})
	require.NoError(t, err)
	tx, got := tryWaitingOnTheServer(t, l, d.Pool, "r2", time.Second)

	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	select {
	case err := <-got:
		require.ErrorIs(t, err, pglock.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("TryAcquire still waits for the server after Close")
	}
	require.False(t, firstConn().lastDeadline().IsZero(), "the try cleared the deadline pgx closes its connection under")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-closed)
}

// singleConnPool is a pool of one connection at a time, configured, and a function that
// returns the first connection it made.
func singleConnPool(t *testing.T, d *testdb.DB, configure func(*pgxpool.Config)) (*pgxpool.Pool, func() *deadlineRecorder) {
	var (
		mu    sync.Mutex
		first *deadlineRecorder
	)
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			recorder := &deadlineRecorder{Conn: conn}
			if first == nil {
				first = recorder
			}
			return recorder, nil
		}
		if configure != nil {
			configure(c)
		}
	})
	return pool, func() *deadlineRecorder {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
}

// tryWaitingOnTheServer makes name an expired lease whose row a transaction (returned) keeps
// locked, and starts l.TryAcquire on it: the takeover waits on the server until the
// transaction ends. It returns once the try is under way, with a channel for its error.
func tryWaitingOnTheServer(t *testing.T, l *tablelock.Locker, admin *pgxpool.Pool, name string, ttl time.Duration) (pgx.Tx, <-chan error) {
	t.Helper()
	_, err := admin.Exec(context.Background(), `INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at)
		VALUES ($1, 'gone', 1, clock_timestamp() - interval '1 minute', clock_timestamp() - interval '1 second')`, name)
	require.NoError(t, err)
	tx := lockTheRow(t, admin, name)
	got := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(context.Background(), name, &tablelock.AcquireOptions{TTL: ttl})
		got <- err
	}()
	waitForStatement(t, admin, "TryAcquireLock")
	return tx, got
}

// A try whose connection is lost while the server runs it may still take the lock: it is given
// back, and Close waits for that.
func TestTryLostWithItsConnectionGivesTheLockBack(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	var dials atomic.Int32
	redial := make(chan struct{})
	pool, firstConn := singleConnPool(t, d, func(c *pgxpool.Config) {
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			// Every connection after the first waits until the try has committed: the
			// give-back's, which would otherwise overtake the try (finding the old row, it
			// does not wait for its lock), and the one pgx dials to cancel the lost query,
			// which would otherwise abort the try.
			if dials.Add(1) > 1 {
				<-redial
			}
			return dial(ctx, network, addr)
		}
	})
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "x"})
	require.NoError(t, err)
	tx, got := tryWaitingOnTheServer(t, l, d.Pool, "r9", time.Minute)
	require.NoError(t, firstConn().Conn.Close()) // the client side goes; the server runs on
	require.Error(t, testdb.Receive(t, got))
	require.NoError(t, tx.Rollback(ctx))
	testdb.WaitFor(t, func() bool {
		row, found := readLock(t, d.Pool, "r9")
		return found && row.Holder != "gone"
	}, "the lost try took the lock")
	close(redial)
	require.NoError(t, l.Close(ctx))
	_, held := readLock(t, d.Pool, "r9")
	require.False(t, held, "the lock the lost try took was given back")
}

// A Release whose context has ended still releases: in the background, and Close waits for it.
func TestReleaseWithAContextThatEndedReleasesInTheBackground(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l, err := tablelock.New(d.Pool, nil)
	require.NoError(t, err)
	ctx := context.Background()
	lk, err := l.TryAcquire(ctx, "r10", &tablelock.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)

	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, lk.Release(ended), context.Canceled)
	require.NoError(t, l.Close(ctx))
	_, held := readLock(t, d.Pool, "r10")
	require.False(t, held)
}

// A try whose answer came back just before Close cut its connection off: the lock it took is
// released at once and the caller gets ErrClosed. The connection, whose deadline never struck,
// goes back to the pool and works.
func TestTryThatBeatCloseIsReleasedAndItsConnectionReused(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	g := &answerGate{started: make(chan struct{}), release: make(chan struct{})}
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = afterQuery(g.end)
	})
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "x"})
	require.NoError(t, err)
	held, err := l.TryAcquire(ctx, "held", nil)
	require.NoError(t, err)
	g.armed.Store(true)

	got := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(ctx, "r", &tablelock.AcquireOptions{TTL: time.Minute})
		got <- err
	}()
	<-g.started
	closed := make(chan error, 1)
	go func() { closed <- l.Close(ctx) }()
	<-held.Lost() // Close declares held locks lost after it has set the deadlines
	close(g.release)
	require.ErrorIs(t, <-got, pglock.ErrClosed)
	require.NoError(t, <-closed)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM distributed_locks").Scan(&rows))
	require.Zero(t, rows, "both locks released at once, not left to their TTL")
	require.EqualValues(t, 1, pool.Stat().NewConnsCount(), "the try's connection went back usable")
}

// A try whose answer came back just as Close began gives the lock back itself; when that release
// is held up on the server, Close still returns once its own context ends, not at the TTL.
func TestCloseHonoursItsContextBehindATrysRelease(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	g := &answerGate{started: make(chan struct{}), release: make(chan struct{})}
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = afterQuery(g.end) })
	l, err := tablelock.New(pool, nil)
	require.NoError(t, err)
	g.armed.Store(true)
	tried := make(chan error, 1)
	go func() {
		_, err := l.TryAcquire(ctx, "r", &tablelock.AcquireOptions{TTL: 20 * time.Second})
		tried <- err
	}()
	<-g.started // the lock is the try's, its answer held up on the way back
	tx := lockTheRow(t, d.Pool, "r")

	closed := make(chan struct{})
	go func() {
		closeCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		l.Close(closeCtx)
		close(closed)
	}()
	testdb.WaitFor(t, func() bool {
		// Bounded: a probe that got in before Close could wait behind the gated query.
		probeCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := l.TryAcquire(probeCtx, "probe", nil)
		return errors.Is(err, pglock.ErrClosed)
	}, "Close began")
	close(g.release) // the try finds the Locker closed and releases, behind the row lock

	// Close returns while the row stays locked: it did not wait for the release to finish.
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // the release itself may wait out the 20 s TTL
		t.Fatalf("Close(200 ms) still waits for the try's release after 10 s")
	}
	require.NoError(t, tx.Rollback(ctx))
	require.ErrorIs(t, <-tried, pglock.ErrClosed)
}

// deadlineRecorder is a connection that remembers the last deadline set on it.
type deadlineRecorder struct {
	net.Conn
	mu       sync.Mutex
	deadline time.Time
}

func (c *deadlineRecorder) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *deadlineRecorder) lastDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline
}

// afterQuery is a tracer that runs on each query's way back, after its answer was read.
type afterQuery func(pgx.TraceQueryEndData)

func (afterQuery) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (f afterQuery) TraceQueryEnd(_ context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	f(data)
}

// beforeQuery is a tracer that runs as each query starts, before it is sent.
type beforeQuery func(pgx.TraceQueryStartData)

func (f beforeQuery) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	f(data)
	return ctx
}

func (beforeQuery) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// answerGate, once armed, holds up the next query that succeeds after its answer was read,
// until release is closed.
type answerGate struct {
	armed   atomic.Bool
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func (g *answerGate) end(data pgx.TraceQueryEndData) {
	if g.armed.Load() && data.Err == nil {
		g.once.Do(func() {
			close(g.started)
			<-g.release
		})
	}
}

// After Extend to a shorter TTL, renewals follow the new TTL's heartbeat.
func TestExtendToAShorterTTLKeepsRenewing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.Pool, nil)
	lk, err := l.TryAcquire(ctx, "r3", &tablelock.AcquireOptions{TTL: 30 * time.Second})
	require.NoError(t, err)
	// Renewed a second later than this (every second), or lost at once on the old heartbeat's
	// schedule (every ten).
	require.NoError(t, lk.Extend(ctx, 3*time.Second))
	renewedPast(t, lk, lk.ExpiresAt().Add(time.Second))
	require.NoError(t, lk.Err(), "lost although it should have been renewed every second")
}

// An Extend to a shorter TTL that fails on the client may still commit on the server: the
// deadline moves in before the request, so the lock is declared lost before anyone else gets it.
func TestAmbiguousShorterExtendMovesTheDeadlineIn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	// No heartbeat: with one, the keeper renews in time and nobody else gets the lock at all.
	l, err := tablelock.New(d.Pool, &tablelock.Config{AppName: "x", HeartbeatInterval: -1})
	require.NoError(t, err)
	defer l.Close(ctx)
	other := newLocker(t, d.NewPool(t, nil), nil)
	lk, err := l.TryAcquire(ctx, "r4", &tablelock.AcquireOptions{TTL: 30 * time.Second})
	require.NoError(t, err)

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, lk.Fence(ctx, tx)) // FOR SHARE on the lock row: the extend blocks behind it
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = lk.Extend(short, time.Second)
	cancel()
	require.Error(t, err, "the extend timed out on the client")
	require.NoError(t, tx.Commit(ctx)) // ... and may now run, and commit, on the server
	// Whether or not the server committed the 1 s lease (and gave the lock away since), the
	// holder must count with it: it is declared lost at that lease's end, not the 30 s one's.
	select {
	case <-lk.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("not declared lost: the deadline is still the 30 s lease's")
	}
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
	if lk2, err := other.TryAcquire(ctx, "r4", nil); err == nil {
		require.NoError(t, lk2.Release(ctx))
	}
}

// A waiter whose poll rewrites its queue place while a release hands it the lock must not count
// its lease from that poll, later than the handoff: the poll takes the lock instead, renewing
// the lease from its own start. A second waiter never gets the lock while the first holds it.
func TestHandoffRacingAPollIsNeverCountedFromLater(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	const ttl = 3 * time.Second
	_, err := d.Pool.Exec(ctx, "SELECT pglock_acquire('r5', 'A', 600000)")
	require.NoError(t, err)
	// w's margin (1 s) is the time a busy machine may take to run its loss's timer; shorter
	// than the 1.6 s by which a lease counted from the poll would end late.
	w := newLocker(t, d.NewPool(t, nil), &tablelock.Config{MaxPollInterval: 20 * time.Millisecond, HeartbeatInterval: -1, SafetyMargin: time.Second})
	x := newLocker(t, d.NewPool(t, nil), &tablelock.Config{MaxPollInterval: 20 * time.Millisecond})
	opts := &tablelock.AcquireOptions{TTL: ttl}

	wGot, xGot := make(chan *tablelock.Lock, 1), make(chan *tablelock.Lock, 1)
	go func() { lk, err := w.Acquire(ctx, "r5", opts); assert.NoError(t, err); wGot <- lk }()
	waitForQueue(t, d.Pool, 1)
	go func() { lk, err := x.Acquire(ctx, "r5", opts); assert.NoError(t, err); xGot <- lk }()
	waitForQueue(t, d.Pool, 2)

	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	var handed bool
	require.NoError(t, tx.QueryRow(ctx, "SELECT handed_off FROM pglock_release('r5', 'A')").Scan(&handed))
	require.True(t, handed)
	time.Sleep(1600 * time.Millisecond) // w's place ages past ttl/3: its next poll rewrites it and blocks on us
	require.NoError(t, tx.Commit(ctx))
	wlk := <-wGot

	xlk := <-xGot // w does not renew (no heartbeat): x gets the lock once w's lease runs out
	defer xlk.Release(ctx)
	require.Error(t, wlk.Err(), "x holds the lock while w has not been told it lost it")
}

// A lock handed over onto an old queue place has a near deadline (the place's write + TTL less
// the margin): it is renewed in time, never declared lost while the database holds it for us.
// A place grows old when its keeping fails (here the role may not keep places, so the waiter
// keeps its place only by polling, when the keeping gives it up).
func TestHandoffOntoAnOldPlaceIsRenewedInTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		cfg      *tablelock.Config
		placeAge time.Duration // at the handoff
	}{
		// 2.7 s of lease by the place's count, 1.8 s of it left: a heartbeat (1 s) in time.
		{"default margin", 3 * time.Second, nil, 900 * time.Millisecond},
		// 3 s of lease by the place's count, 1.3 s of it left: less than a heartbeat (2.5 s),
		// so a keeper that waits for its heartbeat loses it. The place stays younger than a
		// third of the TTL (2 s), past which a poll would write it anew.
		{"wide margin", 6 * time.Second, &tablelock.Config{SafetyMargin: 3 * time.Second, HeartbeatInterval: 2500 * time.Millisecond}, 1700 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			ctx := context.Background()
			w := newLocker(t, d.NewPool(t, grantedRole(t, d, slices.DeleteFunc(slices.Clone(leastPrivilege), func(f string) bool {
				return strings.HasPrefix(f, "pglock_wait_many")
			}), nil)), tc.cfg)
			for attempt := range 3 {
				name := fmt.Sprintf("r6-%d", attempt)
				_, err := d.Pool.Exec(ctx, "SELECT pglock_acquire($1, 'A', 600000)", name)
				require.NoError(t, err)
				got := make(chan *tablelock.Lock, 1)
				go func() {
					lk, err := w.Acquire(ctx, name, &tablelock.AcquireOptions{TTL: tc.ttl})
					assert.NoError(t, err)
					got <- lk
				}()
				waitForQueue(t, d.Pool, 1)
				testdb.WaitFor(t, func() bool {
					var age time.Duration
					require.NoError(t, d.Pool.QueryRow(ctx, `SELECT clock_timestamp() - (expires_at - ttl_ms * interval '1 ms')
						FROM distributed_lock_waiters WHERE lock_name = $1`, name).Scan(&age))
					return age > tc.placeAge
				})
				_, err = d.Pool.Exec(ctx, "SELECT pglock_release($1, 'A')", name)
				require.NoError(t, err)
				lk := testdb.Receive(t, got)
				renewedPast(t, lk, lk.ExpiresAt()) // its first renewal, or its loss
				row, _ := readLock(t, d.Pool, name)
				if lk.Err() != nil && row.Live {
					t.Fatalf("attempt %d: lock declared lost (%v) while the database still holds it for us", attempt, lk.Err())
				}
				lk.Release(ctx)
				waitForQueue(t, d.Pool, 0)
			}
		})
	}
}

// Without notifications, a lock handed to a waiter that is not its Locker's first waiter of the
// name (it registered second, but queued first in the database) is found by a poll of the
// first, which wakes it: it does not wait for a poll of its own, a third of its TTL away.
func TestPollWakesTheLocalWaiterTheLockWentTo(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	var armed atomic.Bool
	firstPoll, sendIt := make(chan struct{}), make(chan struct{})
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = beforeQuery(func(data pgx.TraceQueryStartData) {
			if strings.Contains(data.SQL, "-- name: PollLock ") && armed.CompareAndSwap(true, false) {
				close(firstPoll)
				<-sendIt
			}
		})
	})
	holder := newLocker(t, d.Pool, nil)
	l := newLocker(t, pool, &tablelock.Config{DisableNotifications: true, MaxPollInterval: 50 * time.Millisecond})
	held, err := holder.TryAcquire(ctx, "w2", nil)
	require.NoError(t, err)
	opts := &tablelock.AcquireOptions{TTL: 6 * time.Minute} // a waiter not first polls 1 to 2 min apart

	armed.Store(true)
	first := make(chan *tablelock.Lock, 1)
	go func() {
		lk, err := l.Acquire(ctx, "w2", opts)
		if assert.NoError(t, err) {
			first <- lk
		}
	}()
	<-firstPoll // the first waiter's first poll is held up before it is sent
	second := acquireQueued(t, l, d.Pool, "w2", opts)
	close(sendIt)
	waitForQueue(t, d.Pool, 2)

	require.NoError(t, held.Release(ctx)) // to the second waiter, first in the database's queue
	require.NoError(t, testdb.Receive(t, second).Release(ctx))
	require.NoError(t, testdb.Receive(t, first).Release(ctx))
}

// Close returns by its context's deadline even while a waiter's poll is stuck (here, waiting
// for a connection of an exhausted pool).
func TestCloseHonoursItsContextWhileAPollIsStuck(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	_, err := d.Pool.Exec(ctx, "SELECT pglock_acquire('r7', 'A', 600000)")
	require.NoError(t, err)
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "x"})
	require.NoError(t, err)
	go l.Acquire(ctx, "r7", nil)
	waitForQueue(t, d.Pool, 1)
	conn, err := pool.Acquire(ctx) // the application uses the pool's only connection for a while
	require.NoError(t, err)
	defer conn.Release()
	time.Sleep(1500 * time.Millisecond) // the waiter's next poll now waits for a connection

	closed := make(chan struct{})
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		l.Close(cctx)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		conn.Release()
		<-closed
		t.Fatal("Close(ctx with 200ms timeout) still running after 3s")
	}
}

// A panic in WithLock's function releases the lock (and goes on up).
func TestWithLockReleasesWhenTheFunctionPanics(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.Pool, nil)
	other := newLocker(t, d.Pool, nil)
	require.PanicsWithValue(t, "boom", func() {
		l.WithLock(ctx, "r8", nil, func(context.Context) error { panic("boom") })
	})
	lk, err := other.TryAcquire(ctx, "r8", nil)
	require.NoError(t, err, "still held (Stats.Held=%d) after fn panicked", l.Stats().Held)
	require.NoError(t, lk.Release(ctx))
	require.Equal(t, tablelock.Stats{}, l.Stats())
}

// A free lock kept for the first waiter has no token yet. A try, and a wait queued behind that
// waiter, are told whom the lock is kept for (they used to fail reading the NULL token).
func TestLockKeptForAWaiterIsReportedAsHeld(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `SELECT pglock_attempt('kept', 'lapsing', 30000, '{}', 'sql', false)`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `SELECT pglock_attempt('kept', 'first-waiter', 60000, '{"by": "w"}', 'w-instance', true)`)
	require.NoError(t, err)
	_, err = d.Pool.Exec(ctx, `UPDATE distributed_locks SET expires_at = clock_timestamp() - interval '1 second'`)
	require.NoError(t, err)
	l := newLocker(t, d.Pool, nil)

	requireKept := func(err error) {
		t.Helper()
		var locked *tablelock.LockedError
		require.ErrorAs(t, err, &locked)
		require.Equal(t, "first-waiter", locked.Holder)
		require.Equal(t, "w-instance", locked.Instance)
		require.Equal(t, map[string]any{"by": "w"}, locked.Metadata)
	}
	_, err = l.TryAcquire(ctx, "kept", nil)
	requireKept(err)
	// Long enough for a first poll on a busy machine (the error names the holder once one has
	// seen it); the place is kept for another for a minute.
	_, err = l.Acquire(ctx, "kept", &tablelock.AcquireOptions{WaitTimeout: 2 * time.Second})
	requireKept(err)
}

// One renewal at a time: whichever of the heartbeat and an Extend (whose context never ends)
// the server holds up, the other does not get through (an Extend waits behind the heartbeat;
// a heartbeat due while an Extend is stuck is passed over by its tick). Close must still return
// once its own context ends, and the Extend must report the lock lost, as Close gave it up.
//
// Not parallel: it looks for the waiting renewal among all goroutines, and another test's could
// be there.
func TestCloseIsNotHeldUpByARenewalWaitingBehindAStuckOne(t *testing.T) {
	for _, stuck := range []string{"Extend", "heartbeat"} {
		t.Run(stuck+" stuck", func(t *testing.T) {
			d := testdb.New(t, nil)
			ctx := context.Background()
			heartbeat, waiting := time.Second, ""
			if stuck == "heartbeat" {
				heartbeat, waiting = 50*time.Millisecond, "tablelock.(*Lock).Extend"
			}
			l, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{HeartbeatInterval: heartbeat})
			require.NoError(t, err)
			lk, err := l.TryAcquire(ctx, "r5", &tablelock.AcquireOptions{TTL: time.Minute})
			require.NoError(t, err)
			tx := lockTheTable(t, d.Pool)
			extended := make(chan error, 1)
			extend := func() { extended <- lk.Extend(context.Background(), time.Minute) }
			if stuck == "Extend" {
				go extend()
			}
			waitForStatement(t, d.Pool, "RenewLocks") // the first renewal is on the server
			if stuck == "heartbeat" {
				go extend()
			}
			if waiting != "" {
				testdb.WaitFor(t, func() bool { return goroutineRunning(waiting) }, "the other renewal waits")
			}

			closeCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			closed := make(chan error, 1)
			go func() { closed <- l.Close(closeCtx) }()
			select {
			case err := <-closed:
				require.ErrorIs(t, err, context.DeadlineExceeded, "its release of the lock waited on the row too")
			case <-time.After(10 * time.Second):
				t.Fatal("Close waits for a renewal that waits for a stuck one")
			}
			require.NoError(t, tx.Rollback(ctx))
			require.ErrorIs(t, <-extended, pglock.ErrLockLost, "Close gave the lock up meanwhile")
		})
	}
}

// The other way round: an Extend waiting behind a heartbeat that the server holds up returns
// when its context ends, with an error matching both the context's error and its cause.
func TestExtendWaitingBehindAStuckHeartbeatHonoursItsContext(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.NewPool(t, nil), &tablelock.Config{HeartbeatInterval: 50 * time.Millisecond})
	lk, err := l.TryAcquire(ctx, "r6", &tablelock.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)
	tx := lockTheTable(t, d.Pool)
	waitForStatement(t, d.Pool, "RenewLocks") // the heartbeat's

	shuttingDown := errors.New("shutting down")
	extendCtx, cancel := context.WithTimeoutCause(ctx, 100*time.Millisecond, shuttingDown)
	defer cancel()
	extended := make(chan error, 1)
	go func() { extended <- lk.Extend(extendCtx, time.Minute) }()
	select {
	case err := <-extended:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, shuttingDown)
	case <-time.After(10 * time.Second):
		t.Fatal("Extend waits for the stuck heartbeat past its context")
	}
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, lk.Release(ctx))
}

// A heartbeat waiting behind a stuck Extend stops waiting at the lock's deadline, when the loss
// timer declares the lock lost: that is the whole story, not a renewal that failed and is
// retried. (The two race; three locks make a wrong report all but certain to show.)
func TestHeartbeatWaitingAtTheDeadlineLeavesTheLossToTell(t *testing.T) {
	t.Parallel()
	for i := range 3 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			ctx := context.Background()
			var mu sync.Mutex
			var kinds []pglock.EventKind
			l := newLocker(t, d.NewPool(t, nil), &tablelock.Config{HeartbeatInterval: 100 * time.Millisecond,
				Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
					mu.Lock()
					defer mu.Unlock()
					kinds = append(kinds, e.Kind)
				})})
			lk, err := l.TryAcquire(ctx, "r8", &tablelock.AcquireOptions{TTL: 400 * time.Millisecond})
			require.NoError(t, err)
			tx := lockTheRow(t, d.Pool, "r8")
			extended := make(chan error, 1)
			go func() { extended <- lk.Extend(context.Background(), 400*time.Millisecond) }()
			<-lk.Lost()
			require.NoError(t, tx.Rollback(ctx))
			require.ErrorIs(t, <-extended, pglock.ErrLockLost)
			// Events come in order: once the loss is told, a failed renewal before it would be too.
			testdb.WaitFor(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(kinds, pglock.EventLost)
			})
			mu.Lock()
			defer mu.Unlock()
			require.NotContains(t, kinds, pglock.EventRenewFailed)
		})
	}
}

// waitForStatement waits until a request of the named query waits on a lock on the server.
func waitForStatement(t *testing.T, pool *pgxpool.Pool, query string) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%name: ' || $1 || ' %')`, query).Scan(&waiting)
		return err == nil && waiting
	}, "%s waits on the server", query)
}

// goroutineRunning reports whether a goroutine is in the named function.
func goroutineRunning(function string) bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), function)
}

// A release sent again in the background keeps trying through transient failures: here the
// connection it had was terminated, and the next two attempts to connect fail.
func TestBackgroundReleaseRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	var failDials atomic.Int32
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.RuntimeParams["application_name"] = "release-retry"
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if failDials.Add(-1) >= 0 {
				return nil, errors.New("dial refused by the test")
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	})
	l, err := tablelock.New(pool, nil)
	require.NoError(t, err)
	lk, err := l.TryAcquire(ctx, "r11", &tablelock.AcquireOptions{TTL: time.Minute})
	require.NoError(t, err)

	failDials.Store(2)
	_, err = d.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'release-retry'")
	require.NoError(t, err)
	require.Error(t, lk.Release(ctx), "sent on the terminated connection")
	require.NoError(t, l.Close(ctx))
	_, held := readLock(t, d.Pool, "r11")
	require.False(t, held, "released by a later attempt")
	require.Negative(t, failDials.Load(), "both refused dials were tried")
}

// An Acquire whose pool is closed under it stops waiting, rather than retrying until its
// Locker closes.
func TestAcquireStopsWhenItsPoolIsClosed(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	held, err := newLocker(t, d.Pool, nil).TryAcquire(ctx, "r12", nil)
	require.NoError(t, err)
	pool := d.NewPool(t, nil)
	l := newLocker(t, pool, &tablelock.Config{MaxPollInterval: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "r12", nil)
		done <- err
	}()
	waitForQueue(t, d.Pool, 1)
	pool.Close()
	require.Error(t, testdb.Receive(t, done))
	require.NoError(t, held.Release(ctx))
}
