package tablelock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// statementCounter counts the statements a pool sends: those of the sqlc query named query, or
// all of them if query is empty; and the holders (second argument) that sent them since the
// last reset.
type statementCounter struct {
	query   string
	n       atomic.Int64
	mu      sync.Mutex
	holders map[any]bool
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if c.query == "" || strings.Contains(data.SQL, "-- name: "+c.query+" ") {
		c.n.Add(1)
		c.mu.Lock()
		if c.holders != nil && len(data.Args) > 1 {
			c.holders[data.Args[1]] = true
		}
		c.mu.Unlock()
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// pollersSince returns a function that reports how many distinct holders sent the statement
// since now.
func (c *statementCounter) pollersSince() func() int {
	c.mu.Lock()
	c.holders = map[any]bool{}
	c.mu.Unlock()
	return func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.holders)
	}
}

// countedPool is a pool whose polls (PollLock) are counted, its connections named app, then
// configured.
func countedPool(t *testing.T, d *testdb.DB, app string, maxConns int32, configure ...func(*pgxpool.Config)) (*pgxpool.Pool, *statementCounter) {
	counter := &statementCounter{query: "PollLock"}
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = maxConns
		c.ConnConfig.Tracer = counter
		c.ConnConfig.RuntimeParams["application_name"] = app
		for _, apply := range configure {
			apply(c)
		}
	})
	return pool, counter
}

// listeners counts the sessions named app whose last statement was a Locker's LISTEN.
func listeners(t *testing.T, pool *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query ~ '^(UN)?LISTEN '`, app).Scan(&n))
	return n
}

func waitForQueue(t *testing.T, pool *pgxpool.Pool, waiters int) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		_, n := countRows(t, pool)
		return n == waiters
	}, "waiting for %d queued waiters", waiters)
}

// A release hands the lock to the waiter directly: the waiter acquires without polling again.
// Its Locker listens on a connection made as its pool makes them, through the pool's hooks:
// here BeforeConnect supplies the role, without which no connection could be made, and
// AfterConnect renames the session.
func TestReleaseHandsTheLockToAWaiterWithoutAPoll(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		configure   func(*pgxpool.Config)
		listenerApp string
	}{
		{"a plain pool", func(*pgxpool.Config) {}, "waiter"},
		{"a pool that connects through its hooks", func(c *pgxpool.Config) {
			role := c.ConnConfig.User
			c.ConnConfig.User = "pglock_no_such_role"
			c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
				cc.User = role
				return nil
			}
			c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, "SET application_name = 'waiter-hooked'")
				return err
			}
		}, "waiter-hooked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			waiterPool, polls := countedPool(t, d, "waiter", 4, tc.configure)
			holder := newLocker(t, d.Pool, nil)
			waiter := newLocker(t, waiterPool, &tablelock.Config{MaxPollInterval: time.Hour})
			ctx := context.Background()
			opts := &tablelock.AcquireOptions{TTL: time.Hour}

			held, err := holder.TryAcquire(ctx, "handoff", opts)
			require.NoError(t, err)
			acquired := acquireQueued(t, waiter, d.Pool, "handoff", opts)
			testdb.WaitFor(t, func() bool { return listeners(t, d.Pool, tc.listenerApp) == 1 }, "the listener connected as the pool does")
			// A listening waiter polls when it queues and once its listener listens (which can
			// come after the LISTEN is seen), then not before the holder's lease (an hour) could
			// end: only the handoff can wake it.
			testdb.WaitFor(t, func() bool { return polls.n.Load() >= 2 }, "the waiter polled once listening")

			before := polls.n.Load()
			require.NoError(t, held.Release(ctx))
			lk := <-acquired
			require.Equal(t, before, polls.n.Load(), "woken by the handoff, not by a poll")
			require.Greater(t, lk.Token(), held.Token())
			row, _ := readLock(t, d.Pool, "handoff")
			require.Equal(t, lk.Token(), row.Token)
			require.NoError(t, lk.Release(ctx))
		})
	}
}

// 1000 goroutines of one process wait on one name: they use the pool and one listener, a
// release wakes one of them, and all of them get the lock in turn, in queue order.
func TestThousandWaitersInOneProcess(t *testing.T) {
	t.Parallel()
	const waiters, maxConns = 1000, 4
	d := testdb.New(t, nil)
	waiterPool, polls := countedPool(t, d, "thousand", maxConns)
	holder := newLocker(t, d.Pool, nil)
	l := newLocker(t, waiterPool, nil)
	ctx := context.Background()
	opts := &tablelock.AcquireOptions{TTL: time.Minute} // places are rewritten only every 10-20 s

	first, err := holder.TryAcquire(ctx, "hot", opts)
	require.NoError(t, err)

	gate := make(chan struct{}) // each new holder waits here before releasing
	tokens := make(chan int64, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			lk, err := l.Acquire(ctx, "hot", opts)
			if !assert.NoError(t, err) {
				return
			}
			tokens <- lk.Token()
			<-gate
			assert.NoError(t, lk.Release(ctx))
		})
	}
	waitForQueue(t, d.Pool, waiters)
	require.Equal(t, waiters, l.Stats().Waiting)

	var connections int
	require.NoError(t, d.Pool.QueryRow(ctx,
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'thousand'").Scan(&connections))
	require.LessOrEqual(t, connections, maxConns+1, "the pool and the one listener")

	before, pollers := polls.n.Load(), polls.pollersSince()
	require.NoError(t, first.Release(ctx))
	last := <-tokens
	require.Greater(t, last, first.Token())
	time.Sleep(200 * time.Millisecond)
	// The new holder was handed the lock without polling; the waiter that became first in line
	// in this process polls, backing off; nobody else stirs.
	require.LessOrEqual(t, pollers(), 2, "one release wakes one or two waiters, not a thousand")
	require.LessOrEqual(t, polls.n.Load()-before, int64(20))

	close(gate)
	for range waiters - 1 {
		token := <-tokens
		require.Greater(t, token, last, "each holder's token is larger than the one before")
		last = token
	}
	wg.Wait()
	require.Equal(t, tablelock.Stats{}, l.Stats())
	locks, queued := countRows(t, d.Pool)
	require.Zero(t, locks)
	require.Zero(t, queued)
}

// acquireQueued starts l.Acquire(name) in the background and returns once it waits in the
// queue of the database queue is a pool on; the Lock comes on the channel.
func acquireQueued(t *testing.T, l *tablelock.Locker, queue *pgxpool.Pool, name string, opts *tablelock.AcquireOptions) <-chan *tablelock.Lock {
	t.Helper()
	acquired := make(chan *tablelock.Lock, 1)
	go func() {
		lk, err := l.Acquire(context.Background(), name, opts)
		if assert.NoError(t, err) {
			acquired <- lk
		}
	}()
	waitForQueue(t, queue, 1)
	return acquired
}

// Waiters of several processes get the lock in the order they queued, and a releasing process
// that asks again queues behind them.
func TestWaitersAreServedInOrderAndTheReleaserQueuesBehind(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	lockers := make([]*tablelock.Locker, 3)
	for i := range lockers {
		lockers[i] = newLocker(t, d.NewPool(t, nil), nil)
	}

	held, err := lockers[0].TryAcquire(ctx, "fifo", nil)
	require.NoError(t, err)
	order := make(chan int, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			lk, err := lockers[i].Acquire(ctx, "fifo", nil)
			if assert.NoError(t, err) {
				order <- i
				assert.NoError(t, lk.Release(ctx))
			}
		}()
		waitForQueue(t, d.Pool, i)
	}

	require.NoError(t, held.Release(ctx))
	_, err = lockers[0].TryAcquire(ctx, "fifo", nil)
	require.ErrorIs(t, err, pglock.ErrLocked, "the lock went to the first waiter, not back to the releaser")
	again, err := lockers[0].Acquire(ctx, "fifo", nil)
	require.NoError(t, err)
	require.Equal(t, 1, <-order)
	require.Equal(t, 2, <-order)
	require.NoError(t, again.Release(ctx))
}

func TestCanceledWaitLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newLocker(t, d.Pool, nil)
	held, err := l.TryAcquire(context.Background(), "c", nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, "c", nil)
		done <- err
	}()
	waitForQueue(t, d.Pool, 1)
	cancel()
	require.ErrorIs(t, testdb.Receive(t, done), context.Canceled)
	waitForQueue(t, d.Pool, 0)
	require.Equal(t, tablelock.Stats{Held: 1}, l.Stats())
	require.NoError(t, held.Release(context.Background()))
}

func TestWaitTimeoutReportsTheHolder(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	holder := newLocker(t, d.Pool, &tablelock.Config{AppName: "holder-app"})
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	held, err := holder.TryAcquire(ctx, "t", &tablelock.AcquireOptions{Metadata: map[string]any{"by": "holder"}})
	require.NoError(t, err)

	const timeout = time.Second
	start := time.Now()
	failed := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "t", &tablelock.AcquireOptions{WaitTimeout: timeout})
		failed <- err
	}()
	waitForQueue(t, d.Pool, 1) // it waits in the queue...
	err = testdb.Receive(t, failed)
	require.GreaterOrEqual(t, time.Since(start), timeout, "...for the whole timeout")
	require.ErrorIs(t, err, pglock.ErrLockTimeout)
	require.ErrorIs(t, err, pglock.ErrLocked)
	var locked *tablelock.LockedError
	require.ErrorAs(t, err, &locked)
	require.True(t, strings.HasPrefix(locked.Instance, "holder-app@"))
	require.Equal(t, map[string]any{"by": "holder"}, locked.Metadata)
	require.True(t, locked.ExpiresAt.Equal(held.ExpiresAt()))

	err = l.WithLock(ctx, "t", &tablelock.AcquireOptions{WaitTimeout: 100 * time.Millisecond}, func(context.Context) error {
		panic("must not run")
	})
	require.ErrorIs(t, err, pglock.ErrLocked)

	deadlineCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(deadlineCtx, "t", nil)
	require.ErrorIs(t, err, pglock.ErrLockTimeout, "a context deadline is a timeout too")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	waitForQueue(t, d.Pool, 0)
	require.NoError(t, held.Release(ctx))
}

// A wait bounded by WaitTimeout still gets a lock released before the timeout.
func TestWaitTimeoutWinsALockReleasedInTime(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	holder := newLocker(t, d.Pool, nil)
	l := newLocker(t, d.Pool, nil)
	ctx := context.Background()
	held, err := holder.TryAcquire(ctx, "w", nil)
	require.NoError(t, err)

	acquired := acquireQueued(t, l, d.Pool, "w", &tablelock.AcquireOptions{WaitTimeout: time.Minute})
	require.NoError(t, held.Release(ctx))
	lk := testdb.Receive(t, acquired)
	require.Greater(t, lk.Token(), held.Token())
	require.NoError(t, lk.Release(ctx))
}

// With notifications off (PgBouncer in transaction mode) waiting works by polling alone.
func TestWaitingWithoutNotifications(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool, polls := countedPool(t, d, "polling", 4)
	holder := newLocker(t, d.Pool, nil)
	l := newLocker(t, pool, &tablelock.Config{DisableNotifications: true, MaxPollInterval: 50 * time.Millisecond})
	ctx := context.Background()

	held, err := holder.TryAcquire(ctx, "p", nil)
	require.NoError(t, err)
	acquired := acquireQueued(t, l, d.Pool, "p", nil)
	require.NoError(t, held.Release(ctx))
	lk := <-acquired
	require.Greater(t, polls.n.Load(), int64(1), "found by polling")
	require.Zero(t, listeners(t, d.Pool, "polling"))
	require.NoError(t, lk.Release(ctx))
}

// Only acquisitions (a handoff included) wait for their WAL flush: losing one in a crash could
// let two holders in. A plain release and a waiter's place in the queue do not: lost, the first
// keeps the lock until its TTL, the second is written again at the next poll. Deferred
// triggers record, per transaction, what it wrote and the setting it commits with.
func TestOnlyAcquisitionsWaitForTheWALFlush(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `
		CREATE TABLE commit_modes (seq serial, tx bigint, what text, mode text);
		CREATE FUNCTION record_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO commit_modes (tx, what, mode)
			VALUES (txid_current(), TG_TABLE_NAME || ' ' || TG_OP, current_setting('synchronous_commit'));
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER record_commit_mode AFTER INSERT OR UPDATE OR DELETE ON distributed_locks
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit_mode();
		CREATE CONSTRAINT TRIGGER record_commit_mode AFTER INSERT ON distributed_lock_waiters
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION record_commit_mode();`)
	require.NoError(t, err)
	l := newLocker(t, d.Pool, nil)
	other := newLocker(t, d.NewPool(t, nil), nil)
	// commits returns the transactions recorded since the last call, in commit order, each as
	// "what it wrote: synchronous_commit", and checks the rule on every one of them.
	commits := func() []string {
		t.Helper()
		rows, err := d.Pool.Query(ctx, `
			WITH taken AS (DELETE FROM commit_modes RETURNING *)
			SELECT string_agg(what, ' + ' ORDER BY seq), min(mode), bool_or(what IN ('distributed_locks INSERT', 'distributed_locks UPDATE'))
			  FROM taken GROUP BY tx ORDER BY min(seq)`)
		require.NoError(t, err)
		type commit struct {
			What         string
			Mode         string
			WritesHolder bool
		}
		recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[commit])
		require.NoError(t, err)
		var out []string
		for _, c := range recorded {
			require.Equal(t, c.WritesHolder, c.Mode == "on", "%s: synchronous_commit %s", c.What, c.Mode)
			out = append(out, c.What+": "+c.Mode)
		}
		return out
	}

	alone, err := l.TryAcquire(ctx, "alone", nil)
	require.NoError(t, err)
	require.NoError(t, alone.Release(ctx))
	require.Equal(t, []string{"distributed_locks INSERT: on", "distributed_locks DELETE: off"}, commits())

	contended, err := l.TryAcquire(ctx, "contended", nil)
	require.NoError(t, err)
	acquired := acquireQueued(t, other, d.Pool, "contended", nil)
	require.NoError(t, contended.Release(ctx))
	next := <-acquired
	// A poll of the waiter's can cross the handoff and take the lock itself, renewing it: one
	// more acquisition, durable too, which commits() has checked.
	require.Subset(t, commits(), []string{
		"distributed_locks INSERT: on",
		"distributed_lock_waiters INSERT: off",
		"distributed_locks DELETE + distributed_locks INSERT: on", // the handoff
	})
	require.NoError(t, next.Release(ctx))
}

// Two instances (separate pools) × 8 goroutines × many critical sections on a few names. Each
// critical section writes an enter and an exit row, each in a transaction fenced by the lock;
// the database then proves that no two accepted critical sections of a name interleaved and
// that each one's token was larger than the one before.
func TestMutualExclusionUnderStress(t *testing.T) {
	t.Parallel()
	const instances, goroutines, sections = 2, 8, 125 // 2,000 critical sections
	names := []string{"a", "b", "c"}
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, `CREATE TABLE cs_log (
		id bigserial PRIMARY KEY, lock_name text NOT NULL, token bigint NOT NULL, phase text NOT NULL)`)
	require.NoError(t, err)

	var inside [3]atomic.Int32
	var wg sync.WaitGroup
	for range instances {
		pool := d.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = goroutines })
		l := newLocker(t, pool, nil)
		for g := range goroutines {
			wg.Go(func() {
				for s := range sections {
					n := (g + s) % len(names)
					lk, err := l.Acquire(ctx, names[n], &tablelock.AcquireOptions{TTL: 5 * time.Second})
					if !assert.NoError(t, err) {
						return
					}
					if inside[n].Add(1) != 1 {
						t.Errorf("two holders of %q in this process", names[n])
					}
					for _, phase := range []string{"enter", "exit"} {
						assert.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							if err := lk.Fence(ctx, tx); err != nil {
								return err
							}
							_, err := tx.Exec(ctx, "INSERT INTO cs_log (lock_name, token, phase) VALUES ($1, $2, $3)",
								lk.Name(), lk.Token(), phase)
							return err
						}))
					}
					inside[n].Add(-1)
					assert.NoError(t, lk.Release(ctx))
				}
			})
		}
	}
	wg.Wait()

	var total, overlapping, notGrowing int
	require.NoError(t, d.Pool.QueryRow(ctx, `
		WITH ordered AS (
			SELECT phase, token,
			       lag(phase) OVER w AS prev_phase, lag(token) OVER w AS prev_token
			  FROM cs_log WINDOW w AS (PARTITION BY lock_name ORDER BY id))
		SELECT count(*) FILTER (WHERE phase = 'enter'),
		       count(*) FILTER (WHERE (phase = 'enter' AND prev_phase = 'enter')
		                           OR (phase = 'exit' AND (prev_phase IS DISTINCT FROM 'enter' OR prev_token <> token))),
		       count(*) FILTER (WHERE phase = 'enter' AND token <= prev_token)
		  FROM ordered`).Scan(&total, &overlapping, &notGrowing))
	require.Equal(t, instances*goroutines*sections, total)
	require.Zero(t, overlapping, "every exit follows its own enter, with nothing in between")
	require.Zero(t, notGrowing, "each critical section has a larger token than the one before")
}

// A lock handed to a waiter just as its Locker closes is released before Close returns: the
// Acquire, stopped by Close, gives it back while still counted, even when the application
// closes its pool right after. The rounds vary the timing.
func TestHandoffRacingCloseIsGivenBackBeforeCloseReturns(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	blocker := newLocker(t, d.Pool, nil)
	for round := range 150 {
		name := fmt.Sprintf("raced-%d", round)
		held, err := blocker.TryAcquire(ctx, name, nil)
		require.NoError(t, err)
		pool := d.NewPool(t, nil)
		l, err := tablelock.New(pool, &tablelock.Config{AppName: "closing"})
		require.NoError(t, err)
		acquired := make(chan error, 1)
		go func() {
			_, err := l.Acquire(ctx, name, nil)
			acquired <- err
		}()
		waitForQueue(t, d.Pool, 1)

		require.NoError(t, held.Release(ctx)) // the handoff's NOTIFY is on its way
		time.Sleep(time.Duration(rand.IntN(400)) * time.Microsecond)
		require.NoError(t, l.Close(ctx))
		pool.Close()
		row, ok := readLock(t, d.Pool, name)
		require.False(t, ok, "round %d: the lock is still held, by %s", round, row.Instance)
		if err := <-acquired; err != nil {
			require.ErrorIs(t, err, pglock.ErrClosed)
		}
	}
}

// A waiter that gives up just as a release hands it the lock does not keep it: leaving, it
// releases the lock it was handed, though the handoff committed while its leaving ran. The
// rounds vary the timing.
func TestWaiterGivingUpDuringAHandoffKeepsNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	blocker, waiter := newLocker(t, d.Pool, nil), newLocker(t, d.Pool, &tablelock.Config{AppName: "giving-up"})
	for round := range 200 {
		name := fmt.Sprintf("given-up-%d", round)
		held, err := blocker.TryAcquire(ctx, name, nil)
		require.NoError(t, err)
		waitCtx, cancel := context.WithCancel(ctx)
		acquired := make(chan error, 1)
		go func() {
			lk, err := waiter.Acquire(waitCtx, name, nil)
			if err == nil {
				err = lk.Release(ctx)
			}
			acquired <- err
		}()
		waitForQueue(t, d.Pool, 1)

		released := make(chan error, 1)
		go func() { released <- held.Release(ctx) }()
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
		cancel()
		require.NoError(t, <-released)
		if err := <-acquired; err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
		testdb.WaitFor(t, func() bool { // leaving runs in the background
			_, ok := readLock(t, d.Pool, name)
			return !ok
		}, "round %d: the waiter that gave up holds the lock", round)
	}
}

// Holding and waiting cost the database a few statements per heartbeat, whatever the number of
// locks and waiters: a process renews its locks together, another keeps its waiters' places
// together and, told of releases and handoffs, polls only when a lock's lease could end. Every
// release still hands its lock over.
func TestHoldingAndWaitingCostAFewStatementsPerHeartbeatNotOnePerLock(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := testdb.Context(t)
	var holding, waiting testdb.QueryCounter
	// A heartbeat a second, on leases of 30 s: on a busy machine, renewals of 400 leases in one
	// process run late by less than half a heartbeat (past which the Locker refuses new locks
	// as saturated), and are never lost.
	const heartbeat = time.Second
	cfg := &tablelock.Config{TTL: 30 * time.Second, HeartbeatInterval: heartbeat}
	holder := newLocker(t, d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &holding }), cfg)
	waiter := newLocker(t, d.NewPool(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &waiting }), cfg)

	const n = 200
	held := make([]*tablelock.Lock, n)
	for i := range held {
		held[i] = tryAcquireCaughtUp(t, holder, fmt.Sprintf("busy-%d", i))
	}
	type acquisition struct {
		lk  *tablelock.Lock
		err error
	}
	acquired := make(chan acquisition, n) // reported on the test's goroutine, whenever it fails
	wait := func(i int) {
		go func() {
			lk, err := waiter.Acquire(ctx, fmt.Sprintf("busy-%d", i), nil)
			acquired <- acquisition{lk, err}
		}()
	}
	// A waiter polls once as it begins; then its place is kept by the Set. When the Locker's
	// listener starts listening, every first waiter polls once more (a release may have gone
	// unheard). The first waiter's second poll says the listener listens: from then on, each
	// waiter that begins polls exactly once. Counted, not timed: on a busy CI machine a window
	// opened after a heartbeat with no poll still caught all 400 of these (the first polls had
	// not begun within that heartbeat).
	polls := func() int64 { return waiting.ByName()["PollLock"] }
	wait(0)
	testdb.WaitFor(t, func() bool { return polls() >= 2 }, "the first waiter polls, and again once its Locker listens")
	for i := 1; i < n; i++ {
		wait(i)
	}
	testdb.WaitFor(t, func() bool { return waiter.Stats().Waiting == n && polls() >= n+1 }, "every waiter has polled")

	holdingBefore, waitingBefore, namedBefore, from := holding.Count(), waiting.Count(), waiting.ByName(), time.Now()
	time.Sleep(5 * heartbeat)
	heldStatements, waitStatements := holding.Count()-holdingBefore, waiting.Count()-waitingBefore
	waitByName := waiting.ByName()
	for name, count := range namedBefore {
		if waitByName[name] -= count; waitByName[name] == 0 {
			delete(waitByName, name)
		}
	}
	// A statement per lock (or per waiter) per heartbeat would be 1,000 each over five
	// heartbeats; ten ticks a heartbeat at the most is 50, for as many heartbeats as the
	// window really lasted (a busy machine oversleeps).
	heartbeats := int64(time.Since(from) / heartbeat)
	require.LessOrEqual(t, heldStatements, 10*heartbeats+10, "renewing %d locks for %d heartbeats", n, heartbeats)
	require.LessOrEqual(t, waitStatements, 10*heartbeats+10, "keeping %d waiters' places for %d heartbeats: %v", n, heartbeats, waitByName)
	for _, lk := range held {
		require.NoError(t, lk.Err())
	}

	t.Logf("%d heartbeats: %d statements renewing %d locks, %d keeping %d waiters (%v)", heartbeats, heldStatements, n, waitStatements, n, waitByName)
	for _, lk := range held {
		require.NoError(t, lk.Release(ctx))
		a := testdb.Receive(t, acquired)
		require.NoError(t, a.err)
		require.NoError(t, a.lk.Release(ctx))
	}
}
