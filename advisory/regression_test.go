package advisory_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

// waitUntilWaiting blocks until pid has an ungranted advisory lock request.
func waitUntilWaiting(t *testing.T, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		return slicesContains(advisoryLocks(t, pool), fmt.Sprintf("%d ExclusiveLock false", pid))
	})
}

// slowDialPool is a pool whose new connections (and so pgx's cancel-request connections) are
// delayed by delay once slow is set: it widens the window between "ctx ended" and "the cancel
// reaches the server", as a slow network or a busy postmaster does.
func slowDialPool(t *testing.T, d *testdb.DB, slow *atomic.Bool, delay time.Duration, maxConns int32) *pgxpool.Pool {
	return d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = maxConns
		var dialer net.Dialer
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slow.Load() {
				time.Sleep(delay)
			}
			return dialer.DialContext(ctx, network, addr)
		}
	})
}

// A cancel request that reaches the server late (a slow network) must not land on the
// session's next statement: the session waits for it to arrive before going on.
func TestLateCancelNeverLandsOnALaterStatement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var slow atomic.Bool
	pool := slowDialPool(t, d, &slow, 300*time.Millisecond, 4)
	ctx := context.Background()
	holder := open(t, d.Pool, nil)
	waiter := open(t, pool, nil)
	key, other := advisory.Int64Key(1), advisory.Int64Key(2)
	require.NoError(t, holder.Lock(ctx, key))
	require.NoError(t, holder.Lock(ctx, other))

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(waitCtx, key) }()
	waitUntilWaiting(t, d.Pool, waiter.PID())
	slow.Store(true)
	cancel()                                    // cancel request is on its way (slowly)
	require.NoError(t, holder.Unlock(ctx, key)) // the wait is granted first
	require.NoError(t, <-done, "granted although ctx ended: documented")

	// A fresh, uncanceled Lock on the same session: the stale cancel lands on it.
	lockCtx, cancelLock := context.WithTimeout(ctx, 2*time.Second)
	defer cancelLock()
	err := waiter.Lock(lockCtx, other)
	require.ErrorIs(t, err, pglock.ErrLockTimeout, "expected only a timeout, got %v", err)
	require.NoError(t, waiter.Err(), "the session must survive a cancel meant for an earlier statement")
}

// Nor may it outlive Close and cancel the next pool user's query on that connection.
func TestLateCancelNeverReachesTheNextPoolUser(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var slow atomic.Bool
	pool := slowDialPool(t, d, &slow, 300*time.Millisecond, 1)
	ctx := context.Background()
	holder := open(t, d.Pool, nil)
	key := advisory.Int64Key(1)
	require.NoError(t, holder.Lock(ctx, key))

	s, err := advisory.Open(ctx, pool, nil)
	require.NoError(t, err)
	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Lock(waitCtx, key) }()
	waitUntilWaiting(t, d.Pool, s.PID())
	slow.Store(true)
	cancel()
	require.NoError(t, holder.Unlock(ctx, key))
	require.NoError(t, <-done)
	require.NoError(t, s.Close(ctx))
	slow.Store(false)

	_, err = pool.Exec(ctx, "SELECT pg_sleep(1)") // same connection: MaxConns = 1
	require.NoError(t, err, "another pool user's query must not be canceled by a closed session")
}

// A cancel that races the grant makes PostgreSQL raise 57014 after granting the lock, and a
// session lock survives the aborted statement: the session asks, counts the lock, and Unlock
// frees it. The race is made deterministic by stopping the waiter's backend (SIGSTOP).
func TestCanceledWaitThatWasGrantedIsCounted(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	holder, waiter, probe := open(t, d.Pool, nil), open(t, d.Pool, nil), open(t, d.Pool, nil)
	key := advisory.Int64Key(42)
	require.NoError(t, holder.Lock(ctx, key))

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(waitCtx, key) }()
	waitUntilWaiting(t, d.Pool, waiter.PID())

	pid := int(waiter.PID())
	stopBackend(t, pid)
	defer syscall.Kill(pid, syscall.SIGCONT)
	require.NoError(t, holder.Unlock(ctx, key)) // grants the lock to the stopped waiter
	require.Contains(t, advisoryLocks(t, d.Pool), fmt.Sprintf("%d ExclusiveLock true", pid))
	cancel()                           // SIGINT now pending on the waiter
	time.Sleep(300 * time.Millisecond) // let the cancel request be delivered
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	require.NoError(t, <-done, "granted, so held: Lock says so")
	require.NoError(t, waiter.Unlock(ctx, key))
	require.NoError(t, probe.TryLock(ctx, key), "and Unlock freed it")
	require.NoError(t, waiter.Err())
}

// TryLock and Unlock with a context already done send nothing: the session and its other locks
// are kept.
func TestCanceledContextTryLockKeepsTheSession(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s, probe := open(t, d.Pool, nil), open(t, d.Pool, nil)
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(1)))
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(2)))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, s.TryLock(canceled, advisory.Int64Key(3)))
	require.NoError(t, s.Err(), "a canceled ctx is the caller's business, not a lost connection")
	require.ErrorIs(t, probe.TryLock(ctx, advisory.Int64Key(1)), pglock.ErrLocked, "other locks kept")
}

func TestCanceledContextUnlockKeepsTheSession(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s := open(t, d.Pool, nil)
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(1)))
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(2)))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.Error(t, s.Unlock(canceled, advisory.Int64Key(1)))
	require.NoError(t, s.Err(), "Unlock with a dead ctx should not drop key 2")
}

// lock_timeout (55P03) on a Session wait is an ordinary outcome: ErrLockTimeout, and the
// session keeps its other locks.
func TestLockTimeoutKeepsTheSession(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["lock_timeout"] = "100ms" })
	ctx := context.Background()
	holder, s := open(t, d.Pool, nil), open(t, pool, nil)
	require.NoError(t, holder.Lock(ctx, advisory.Int64Key(1)))
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(2)))
	err := s.Lock(ctx, advisory.Int64Key(1))
	require.ErrorIs(t, err, pglock.ErrLockTimeout)
	require.NoError(t, s.Err(), "a timed-out wait should not lose key 2")
}

// With RegisterNames, a registration cut short by its context (here, stuck behind another
// transaction's uncommitted registration) does not touch the session's connection.
func TestRegistrationCannotBreakTheSession(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s := open(t, d.Pool, &advisory.Config{RegisterNames: true, HealthCheckInterval: time.Hour})
	require.NoError(t, s.Lock(ctx, advisory.Int64Key(1)))

	// Another transaction inserts the same name, uncommitted: the registration's INSERT waits.
	tx, err := d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT register_advisory_name('slow', '')")
	require.NoError(t, err)

	lockCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = s.Lock(lockCtx, advisory.StringKey("slow"))
	require.Error(t, err)
	require.NoError(t, s.Err())
	require.NoError(t, s.TryLock(ctx, advisory.Int64Key(3)), "the session's connection is intact")
}

// PID stays readable after Close.
func TestPIDAfterClose(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	s, err := advisory.Open(context.Background(), d.Pool, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close(context.Background()))
	require.NotPanics(t, func() { s.PID() })
}

// List reads back extreme bigint and pair keys exactly, and names behind negative keys.
func TestListReadsBackExtremeKeys(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s := open(t, d.Pool, &advisory.Config{RegisterNames: true})
	keys := []advisory.Key{
		advisory.Int64Key(-9223372036854775808), advisory.Int64Key(9223372036854775807),
		advisory.Int64Key(-4294967296), advisory.Int64Key(4294967295), advisory.Int64Key(-2147483649),
		advisory.PairKey(-2147483648, 2147483647), advisory.PairKey(-1, -1), advisory.PairKey(0, -2147483648),
	}
	for _, k := range keys {
		require.NoError(t, s.Lock(ctx, k))
	}
	named := []advisory.Key{advisory.StringKey("a"), advisory.StringKey("b"), advisory.StringKey("c"), advisory.StringKey("d")}
	for _, k := range named {
		require.NoError(t, s.RLock(ctx, k))
	}
	locks, err := advisory.List(ctx, d.Pool)
	require.NoError(t, err)
	got := map[string]advisory.LockInfo{}
	for _, l := range locks {
		got[l.Key.String()] = l
	}
	for _, k := range keys {
		require.Contains(t, got, k.String())
	}
	for _, k := range named {
		id, _ := k.Int64()
		l, ok := got[advisory.Int64Key(id).String()]
		require.True(t, ok, "%v", k)
		require.NotEmpty(t, l.Name, "%v (%d) has its name", k, id)
		require.Equal(t, "shared", l.Mode)
	}
}

// Close ends a session whose Lock is waiting: the wait is interrupted with ErrClosed.
func TestCloseEndsAWaitingLock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	holder := open(t, d.Pool, nil)
	s, err := advisory.Open(ctx, d.Pool, nil)
	require.NoError(t, err)
	require.NoError(t, holder.Lock(ctx, advisory.Int64Key(1)))
	waitCtx, cancelWait := context.WithCancel(ctx)
	defer cancelWait()
	locked := make(chan error, 1)
	go func() { locked <- s.Lock(waitCtx, advisory.Int64Key(1)) }()
	waitUntilWaiting(t, d.Pool, s.PID())
	closeCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(closeCtx) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // its ctx is 300 ms: far past it, on any machine
		cancelWait()
		<-closed
		t.Fatal("Close(ctx) blocked past its ctx while a Lock waited")
	}
	require.ErrorIs(t, <-locked, pglock.ErrClosed)
}

// stopBackend sends SIGSTOP to a server backend. Signalling it takes the server's user or
// root: without that the test is skipped with one line, except under CI=true.
func stopBackend(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot stop backend %d: %v", pid, err)
		}
		t.Skipf("cannot stop backend %d (run as root or as the server's user): %v", pid, err)
	}
}
