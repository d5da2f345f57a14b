package tablelock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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

func TestMain(m *testing.M) { testdb.Main(m) }

// newLocker returns a Locker on pool, closed when the test ends.
func newLocker(t *testing.T, pool *pgxpool.Pool, cfg *tablelock.Config) *tablelock.Locker {
	t.Helper()
	if cfg == nil {
		cfg = &tablelock.Config{}
	}
	c := *cfg // callers share one Config among Lockers, and tests run in parallel
	cfg = &c
	if cfg.AppName == "" {
		cfg.AppName = "tablelock-test"
	}
	l, err := tablelock.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	return l
}

type lockRow struct {
	Holder, Instance string
	Token            int64
	ExpiresAt        time.Time
	Live             bool
}

func readLock(t *testing.T, pool *pgxpool.Pool, name string) (lockRow, bool) {
	t.Helper()
	var r lockRow
	err := pool.QueryRow(context.Background(), `SELECT holder_id, instance, fencing_token, expires_at,
		expires_at > clock_timestamp() FROM distributed_locks WHERE lock_name = $1`, name).
		Scan(&r.Holder, &r.Instance, &r.Token, &r.ExpiresAt, &r.Live)
	if err != nil {
		return lockRow{}, false
	}
	return r, true
}

// lockTheRow opens a transaction that keeps the lock row of name locked: every write to the
// lock waits on the server until the transaction ends (rolled back at the latest by cleanup).
func lockTheRow(t *testing.T, pool *pgxpool.Pool, name string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "SELECT FROM distributed_locks WHERE lock_name = $1 FOR UPDATE", name)
	require.NoError(t, err)
	return tx
}

// lockTheTable opens a transaction that keeps the lock table from being written: every
// renewal, release and acquisition waits on the server until the transaction ends (rolled back
// at the latest by cleanup). A renewal passes over a row a transaction has locked (a fence's):
// only a lock on the table holds it up.
func lockTheTable(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(ctx) })
	_, err = tx.Exec(ctx, "LOCK TABLE distributed_locks IN SHARE MODE")
	require.NoError(t, err)
	return tx
}

// lostAt tells when lk's Lost fires (start it before).
func lostAt(lk *tablelock.Lock) <-chan time.Time {
	at := make(chan time.Time, 1)
	go func() {
		<-lk.Lost()
		at <- time.Now()
	}()
	return at
}

// requireHeldAt checks that the database's lease on name had not ended at the moment at, on
// this process's clock. That moment is moved onto the database's clock, erring late, and
// compared with expires_at: asking the database after the event instead would add the query's
// own delay, which on a loaded machine can take up the whole safety margin.
func requireHeldAt(t *testing.T, pool *pgxpool.Pool, name string, at time.Time, msg string) {
	t.Helper()
	before := time.Now()
	var now, expiresAt time.Time
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT clock_timestamp(), expires_at FROM distributed_locks WHERE lock_name = $1", name).Scan(&now, &expiresAt))
	onDatabaseClock := at.Round(0).Add(now.Sub(before))
	require.True(t, onDatabaseClock.Before(expiresAt), "%s: at %s, lease until %s", msg, onDatabaseClock, expiresAt)
}

func countRows(t *testing.T, pool *pgxpool.Pool) (locks, waiters int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM distributed_locks), (SELECT count(*) FROM distributed_lock_waiters)").
		Scan(&locks, &waiters))
	return locks, waiters
}

func TestTryAcquireAndRelease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, &tablelock.Config{AppName: "billing"})
	ctx := context.Background()

	lk, err := l.TryAcquire(ctx, "order:1", &tablelock.AcquireOptions{TTL: 5 * time.Second, Metadata: map[string]any{"job": "42"}})
	require.NoError(t, err)
	require.Equal(t, "order:1", lk.Name())
	require.Equal(t, map[string]any{"job": "42"}, lk.Metadata())
	row, found := readLock(t, pool, "order:1")
	require.True(t, found)
	require.Equal(t, lk.Token(), row.Token)
	require.True(t, lk.ExpiresAt().Equal(row.ExpiresAt))
	host, _ := os.Hostname()
	require.Equal(t, fmt.Sprintf("billing@%s:%d", host, os.Getpid()), row.Instance)

	_, err = l.TryAcquire(ctx, "order:1", nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "another acquisition by the same process is another holder")
	var locked *tablelock.LockedError
	require.ErrorAs(t, err, &locked)
	require.Equal(t, row.Holder, locked.Holder)
	require.Equal(t, row.Instance, locked.Instance)
	require.Equal(t, map[string]any{"job": "42"}, locked.Metadata)
	require.True(t, locked.ExpiresAt.Equal(row.ExpiresAt))
	require.Equal(t, tablelock.Stats{Held: 1}, l.Stats())

	require.NoError(t, lk.Release(ctx))
	require.ErrorIs(t, lk.Release(ctx), pglock.ErrNotHeld, "a second release")
	require.NoError(t, lk.Err(), "a released lock is not lost")
	_, found = readLock(t, pool, "order:1")
	require.False(t, found)

	again, err := l.TryAcquire(ctx, "order:1", nil)
	require.NoError(t, err)
	require.Greater(t, again.Token(), lk.Token())
	require.NoError(t, again.Release(ctx))
}

func TestTwoGoroutinesNeverBothHold(t *testing.T) {
	t.Parallel()
	l := newLocker(t, testdb.New(t, nil).Pool, nil)
	const goroutines = 16
	var wg sync.WaitGroup
	results := make(chan error, goroutines)
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			_, err := l.TryAcquire(context.Background(), "shared", nil)
			results <- err
		})
	}
	close(start)
	wg.Wait()
	close(results)
	won := 0
	for err := range results {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, pglock.ErrLocked)
	}
	require.Equal(t, 1, won)
}

// Bad input is rejected in Go: nothing is sent to the database, let alone written.
func TestBadInputIsRejectedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	statements := &statementCounter{}
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = statements })
	l := newLocker(t, pool, nil)
	ctx := context.Background()

	tests := []struct {
		name    string
		lock    string
		opts    *tablelock.AcquireOptions
		wantErr error
	}{
		{"empty name", "", nil, pglock.ErrInvalidName},
		{"name of 256 bytes", strings.Repeat("n", 256), nil, pglock.ErrInvalidName},
		{"name not UTF-8", "bad\xc3\x28", nil, pglock.ErrInvalidName},
		{"name with NUL", "bad\x00name", nil, pglock.ErrInvalidName},
		{"TTL below 100 ms", "ok", &tablelock.AcquireOptions{TTL: 99 * time.Millisecond}, pglock.ErrInvalidTTL},
		{"negative TTL", "ok", &tablelock.AcquireOptions{TTL: -time.Second}, pglock.ErrInvalidTTL},
		{"TTL above 24 h", "ok", &tablelock.AcquireOptions{TTL: 24*time.Hour + time.Millisecond}, pglock.ErrInvalidTTL},
		{"negative wait timeout", "ok", &tablelock.AcquireOptions{WaitTimeout: -time.Second}, pglock.ErrInvalidArgument},
		{"metadata that is not JSON", "ok", &tablelock.AcquireOptions{Metadata: map[string]any{"c": make(chan int)}}, pglock.ErrInvalidArgument},
		{"metadata with NUL", "ok", &tablelock.AcquireOptions{Metadata: map[string]any{"k": "a\x00b"}}, pglock.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := l.TryAcquire(ctx, tt.lock, tt.opts)
			require.ErrorIs(t, err, tt.wantErr, "TryAcquire")
			_, err = l.Acquire(ctx, tt.lock, tt.opts)
			require.ErrorIs(t, err, tt.wantErr, "Acquire")
			err = l.WithLock(ctx, tt.lock, tt.opts, func(context.Context) error { panic("must not run") })
			require.ErrorIs(t, err, tt.wantErr, "WithLock")
		})
	}
	require.Zero(t, statements.n.Load(), "statements sent")

	_, err := tablelock.New(nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	for _, tc := range []struct {
		field string
		cfg   *tablelock.Config
	}{
		{"TTL", &tablelock.Config{TTL: time.Millisecond}},
		{"SafetyMargin", &tablelock.Config{SafetyMargin: -time.Second}},
		{"SafetyMargin", &tablelock.Config{SafetyMargin: 30 * time.Second}},
		{"SafetyMargin", &tablelock.Config{SafetyMargin: 20 * time.Second}}, // no room for a heartbeat
		{"SafetyMargin", &tablelock.Config{TTL: time.Second, SafetyMargin: 1500 * time.Millisecond}},
		{"HeartbeatInterval", &tablelock.Config{HeartbeatInterval: 27 * time.Second}},
		{"HeartbeatInterval", &tablelock.Config{TTL: time.Second, SafetyMargin: 500 * time.Millisecond, HeartbeatInterval: 600 * time.Millisecond}},
		{"HeartbeatInterval", &tablelock.Config{HeartbeatInterval: time.Microsecond}}, // back to back
		{"MaxPollInterval", &tablelock.Config{MaxPollInterval: -time.Second}},
		{"AppName", &tablelock.Config{AppName: "bad\x00app"}},
		{"AppName", &tablelock.Config{AppName: "bad\xc3\x28"}},
	} {
		_, err := tablelock.New(pool, tc.cfg)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument, "%+v", tc.cfg)
		require.ErrorContains(t, err, "Config."+tc.field)
	}
	// A heartbeat that fits Config.TTL but not a shorter TTL: that lock is renewed every third
	// of its TTL instead of being refused.
	fitting, err := tablelock.New(d.NewPool(t, nil), &tablelock.Config{HeartbeatInterval: 10 * time.Second})
	require.NoError(t, err)
	short, err := fitting.TryAcquire(ctx, "short", &tablelock.AcquireOptions{TTL: 3 * time.Second})
	require.NoError(t, err)
	require.NoError(t, short.Extend(ctx, 4*time.Second))
	require.NoError(t, short.Release(ctx))
	require.NoError(t, fitting.Close(ctx))
	// A lock's TTL must leave room for a heartbeat before the configured margin.
	wide := newLocker(t, pool, &tablelock.Config{SafetyMargin: 5 * time.Second})
	for _, ttl := range []time.Duration{time.Second, 5*time.Second + time.Millisecond, 7499 * time.Millisecond} {
		_, err := wide.TryAcquire(ctx, "ok", &tablelock.AcquireOptions{TTL: ttl})
		require.ErrorIs(t, err, pglock.ErrInvalidTTL, "TTL %s, margin 5 s", ttl)
	}
	require.Zero(t, statements.n.Load(), "statements sent")
	// What only the database can judge is refused there, as a typed error too.
	_, err = l.TryAcquire(ctx, "ok", &tablelock.AcquireOptions{Metadata: map[string]any{"k": json.RawMessage(`"\ud800"`)}})
	require.ErrorIs(t, err, pglock.ErrInvalidArgument, "a lone surrogate")
	locks, waiters := countRows(t, d.Pool)
	require.Zero(t, locks)
	require.Zero(t, waiters)

	// Near the limits, and valid: an instance name cut to 255 bytes keeps whole characters, and
	// a backslash followed by "u0000" is text, not NUL.
	long := newLocker(t, pool, &tablelock.Config{AppName: strings.Repeat("é", 130)})
	lk, err := long.TryAcquire(ctx, strings.Repeat("n", 255), &tablelock.AcquireOptions{Metadata: map[string]any{"k": `\u0000`}})
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	lk, err = l.TryAcquire(ctx, "ok", nil)
	require.NoError(t, err)
	require.ErrorIs(t, lk.Extend(ctx, time.Millisecond), pglock.ErrInvalidTTL)
	require.ErrorIs(t, tablelock.VerifyFence(ctx, nil, "ok", lk.Token()), pglock.ErrInvalidArgument)
	require.NoError(t, lk.Release(ctx))
}

func TestUnmigratedDatabaseSaysToMigrate(t *testing.T) {
	t.Parallel()
	l := newLocker(t, testdb.New(t, &testdb.Options{Unmigrated: true}).Pool, nil)
	_, err := l.TryAcquire(context.Background(), "x", nil)
	require.ErrorIs(t, err, pglock.ErrNotMigrated)
	require.Contains(t, err.Error(), "pglockctl migrate up")
	_, err = l.Acquire(context.Background(), "x", nil)
	require.ErrorIs(t, err, pglock.ErrNotMigrated, "Acquire does not retry what cannot succeed")
}

// renewedPast waits until lk's lease has been renewed to end after t, or lk is lost.
func renewedPast(t *testing.T, lk *tablelock.Lock, after time.Time) {
	t.Helper()
	testdb.WaitFor(t, func() bool { return lk.Err() != nil || lk.ExpiresAt().After(after) }, "the lease renewed past %s", after)
}

// The heartbeat keeps a lock held past its TTL, whatever became of the acquiring context.
func TestHeartbeatKeepsTheLockBeyondItsTTL(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	// Renewed every 100 ms, lost only after seconds without a renewal: a busy machine slows
	// the heartbeat, it does not take the lock.
	l := newLocker(t, pool, &tablelock.Config{HeartbeatInterval: 100 * time.Millisecond})

	ctx, cancel := context.WithCancel(context.Background())
	const ttl = 3 * time.Second
	lk, err := l.Acquire(ctx, "long-job", &tablelock.AcquireOptions{TTL: ttl})
	require.NoError(t, err)
	cancel() // cirello-io/pglock#175: the lock must not die with this context

	first := lk.ExpiresAt()
	renewedPast(t, lk, first.Add(ttl)) // held past the end of a second TTL
	require.NoError(t, lk.Err())
	row, found := readLock(t, pool, "long-job")
	require.True(t, found)
	require.True(t, row.Live)
	require.True(t, lk.ExpiresAt().After(first), "renewed")
	require.NoError(t, lk.Release(context.Background()))
}

// A renewal that fails is retried, and once a retry succeeds the heartbeat is back on its
// schedule: the lock outlives its TTL after its connections were killed under it.
func TestHeartbeatRecoversAfterFailedRenewals(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	pool, _ := countedPool(t, d, "recovers", 4)
	var failed atomic.Int32
	l := newLocker(t, pool, &tablelock.Config{
		HeartbeatInterval: 200 * time.Millisecond, // pgxpool checks connections idle over 1 s before use
		Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
			if e.Kind == pglock.EventRenewFailed {
				failed.Add(1)
			}
		}),
	})
	// Seconds of room for the retry's new connection on a busy machine; renewals every 200 ms.
	const ttl = 5 * time.Second
	lk, err := l.TryAcquire(ctx, "recovers", &tablelock.AcquireOptions{TTL: ttl})
	require.NoError(t, err)
	testdb.WaitFor(t, func() bool {
		time.Sleep(45 * time.Millisecond) // the pace of the terminations, as before the shared helper
		d.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'recovers'")
		return failed.Load() > 0
	}, "a renewal failed")

	renewedPast(t, lk, lk.ExpiresAt().Add(ttl)) // a whole TTL more, which only renewals survive
	require.NoError(t, lk.Err())
	require.NoError(t, lk.Release(ctx))
}

// A renewal that the database accepts after the lock was declared lost at its deadline (it
// waited behind a row lock) revives nothing: Extend reports the loss, no heartbeat follows,
// and the lease runs out for others to take.
func TestRenewalLandingAfterTheLossRevivesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	l := newLocker(t, d.Pool, &tablelock.Config{HeartbeatInterval: 800 * time.Millisecond})
	lk, err := l.TryAcquire(ctx, "late-extend", &tablelock.AcquireOptions{TTL: time.Second})
	require.NoError(t, err)
	tx := lockTheRow(t, d.Pool, "late-extend")

	time.Sleep(300 * time.Millisecond) // the Extend's lease outlasts its wait
	extended := make(chan error, 1)
	go func() { extended <- lk.Extend(ctx, time.Second) }()
	<-lk.Lost() // at the deadline, the Extend still waiting for the row
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-extended, pglock.ErrLockLost)

	time.Sleep(3 * time.Second) // three TTLs: only renewals could keep the lease
	row, found := readLock(t, d.Pool, "late-extend")
	require.False(t, found && row.Live, "a lock declared lost is still renewed")
}

func TestExtend(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, &tablelock.Config{HeartbeatInterval: -1})
	ctx := context.Background()

	lk, err := l.TryAcquire(ctx, "ext", &tablelock.AcquireOptions{TTL: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, lk.Extend(ctx, time.Hour))
	row, _ := readLock(t, pool, "ext")
	require.True(t, lk.ExpiresAt().Equal(row.ExpiresAt))
	require.Greater(t, time.Until(row.ExpiresAt), 50*time.Minute)

	_, err = pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'ext'")
	require.NoError(t, err)
	require.ErrorIs(t, lk.Extend(ctx, time.Hour), pglock.ErrLockLost)
	<-lk.Lost()
	require.ErrorIs(t, lk.Release(ctx), pglock.ErrLockLost)
}

// Without heartbeats a lock is lost at its TTL less the margin, before the database expires it.
func TestLockWithoutHeartbeatIsLostBeforeItExpires(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	// A margin of a second: the time a busy machine may take to run the loss's timer.
	l := newLocker(t, pool, &tablelock.Config{HeartbeatInterval: -1, SafetyMargin: time.Second})
	lk, err := l.TryAcquire(context.Background(), "short", &tablelock.AcquireOptions{TTL: 3 * time.Second})
	require.NoError(t, err)

	requireHeldAt(t, pool, "short", <-lostAt(lk), "Lost fired after the database's lease ended")
	require.ErrorIs(t, lk.Err(), pglock.ErrLockLost)
}

// A lock force-released by an operator is noticed at the first renewal after it, and
// WithLock's function sees its context canceled with cause ErrLockLost.
func TestForceReleaseIsSignalledWithinOneHeartbeat(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	renewals := &statementCounter{query: "RenewLocks"}
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = renewals })
	l := newLocker(t, pool, &tablelock.Config{HeartbeatInterval: 200 * time.Millisecond})
	ctx := context.Background()

	var renewalsSince int64
	err := l.WithLock(ctx, "forced", &tablelock.AcquireOptions{TTL: 10 * time.Second}, func(lockCtx context.Context) error {
		time.Sleep(500 * time.Millisecond) // renewals go through
		_, err := d.Pool.Exec(ctx, "SELECT force_release_lock('forced')")
		require.NoError(t, err)
		before := renewals.n.Load()
		<-lockCtx.Done() // without the renewal's word, only the deadline, 9 s on, would end it
		renewalsSince = renewals.n.Load() - before
		require.ErrorIs(t, context.Cause(lockCtx), pglock.ErrLockLost)
		return nil
	})
	require.ErrorIs(t, err, pglock.ErrLockLost, "WithLock reports the loss")
	require.NotZero(t, renewals.n.Load())
	require.LessOrEqual(t, renewalsSince, int64(1), "the first renewal sent after the release tells the loss")
}

func TestTokensIncreaseAcrossForceRelease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, &tablelock.Config{HeartbeatInterval: -1})
	ctx := context.Background()
	var last int64
	for range 20 {
		lk, err := l.TryAcquire(ctx, "forced", nil)
		require.NoError(t, err)
		require.Greater(t, lk.Token(), last)
		last = lk.Token()
		_, err = pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'forced'")
		require.NoError(t, err)
		require.ErrorIs(t, lk.Release(ctx), pglock.ErrLockLost)
	}
}

func TestCloseReleasesLocksAndStopsWaiters(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l, err := tablelock.New(pool, nil)
	require.NoError(t, err)
	other := newLocker(t, pool, nil)
	ctx := context.Background()

	for _, name := range []string{"a", "b", "c"} {
		_, err := l.TryAcquire(ctx, name, nil)
		require.NoError(t, err)
	}
	blocker, err := other.TryAcquire(ctx, "d", nil)
	require.NoError(t, err)
	waitErrs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Acquire(ctx, "d", nil)
			waitErrs <- err
		}()
	}
	waitForQueue(t, pool, 2)

	require.NoError(t, l.Close(ctx))
	for range 2 {
		require.ErrorIs(t, <-waitErrs, pglock.ErrClosed)
	}
	locks, waiters := countRows(t, pool)
	require.Equal(t, 1, locks, "only the other Locker's lock is left")
	require.Zero(t, waiters)
	_, err = l.TryAcquire(ctx, "e", nil)
	require.ErrorIs(t, err, pglock.ErrClosed)
	require.NoError(t, blocker.Release(ctx))
}

// Close with one Acquire waiting and nothing held: the wait ends with ErrClosed and its place
// in the queue is gone when Close returns. Close then waits for nothing but that wait's clean-up,
// which must be counted before the wait's own count ends; the rounds vary the timing.
func TestCloseWithALoneWaiterLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	blocker, err := newLocker(t, pool, nil).TryAcquire(ctx, "held", nil)
	require.NoError(t, err)
	for range 100 {
		l, err := tablelock.New(pool, nil)
		require.NoError(t, err)
		waitErr := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, "held", nil)
			waitErr <- err
		}()
		waitForQueue(t, pool, 1)

		require.NoError(t, l.Close(ctx))
		require.ErrorIs(t, <-waitErr, pglock.ErrClosed)
		_, waiters := countRows(t, pool)
		require.Zero(t, waiters)
	}
	require.NoError(t, blocker.Release(ctx))
}

// Two Close calls at once: whichever returns first, the Locker's lock is released by then, even
// when the application closes its pool right after. The rounds vary which call does the work.
func TestConcurrentClosesBothReturnAfterTheRelease(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	for round := range 50 {
		name := fmt.Sprintf("closed-twice-%d", round)
		pool := d.NewPool(t, nil)
		l, err := tablelock.New(pool, nil)
		require.NoError(t, err)
		_, err = l.TryAcquire(ctx, name, nil)
		require.NoError(t, err)
		closed := make(chan error, 2)
		start := make(chan struct{})
		for range 2 {
			go func() {
				<-start
				closed <- l.Close(ctx)
			}()
		}
		close(start)

		require.NoError(t, <-closed)
		pool.Close()
		_, held := readLock(t, d.Pool, name)
		require.False(t, held, "round %d: a Close returned with the lock still held", round)
		require.NoError(t, <-closed)
	}
}

// The SQL contract sees the same locks: a holder in another language blocks a Go holder.
func TestInteroperatesWithTheSQLFunctions(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	l := newLocker(t, pool, nil)
	ctx := context.Background()
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT acquire_lock('report', 'python-worker', 30)").Scan(&ok))
	require.True(t, ok)
	_, err := l.TryAcquire(ctx, "report", nil)
	var locked *tablelock.LockedError
	require.ErrorAs(t, err, &locked)
	require.Equal(t, "python-worker", locked.Holder)

	waited := make(chan *tablelock.Lock, 1)
	go func() {
		lk, err := l.Acquire(ctx, "report", nil)
		assert.NoError(t, err)
		waited <- lk
	}()
	testdb.WaitFor(t, func() bool { return l.Stats().Waiting == 1 })
	testdb.WaitFor(t, func() bool { _, waiters := countRows(t, pool); return waiters == 1 })
	require.NoError(t, pool.QueryRow(ctx, "SELECT release_lock('report', 'python-worker')").Scan(&ok))
	require.True(t, ok)
	lk := testdb.Receive(t, waited)
	require.NotNil(t, lk, "the waiter got the lock the SQL holder released")
	require.NoError(t, lk.Release(ctx))
}

func TestErrorsAreTyped(t *testing.T) {
	t.Parallel()
	err := &tablelock.LockedError{Name: "n", Holder: "h", Instance: "i"}
	require.True(t, errors.Is(err, pglock.ErrLocked))
	require.Contains(t, err.Error(), `"n" is held by h (i)`)
}
