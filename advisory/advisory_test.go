package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func open(t *testing.T, pool *pgxpool.Pool, cfg *advisory.Config) *advisory.Session {
	t.Helper()
	s, err := advisory.Open(context.Background(), pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// advisoryLocks lists the advisory locks in the database: "pid mode granted" per lock.
func advisoryLocks(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pid || ' ' || mode || ' ' || granted FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY 1`)
	require.NoError(t, err)
	locks, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return locks
}

// A string key is the SQL expression docs give, so any language (and psql) can compute it.
func TestStringKeysMatchTheDocumentedSQL(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	for _, tt := range []struct{ namespace, name string }{
		{"", "order:1"}, {"", "commande:é→✓"}, {"billing", "order:1"}, {"", strings.Repeat("x", 255)},
	} {
		input := tt.name
		if tt.namespace != "" {
			input = tt.namespace + "\x00" + tt.name
		}
		var want int64
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT ('x' || substr(encode(sha256($1::bytea), 'hex'), 1, 16))::bit(64)::bigint", []byte(input)).Scan(&want))
		got, ok := advisory.NamespacedKey(tt.namespace, tt.name).Int64()
		require.True(t, ok)
		require.Equal(t, want, got, "%q/%q", tt.namespace, tt.name)
		var fromFunction int64
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT pglock_advisory_key($1, $2)", tt.name, tt.namespace).Scan(&fromFunction))
		require.Equal(t, want, fromFunction, "pglock_advisory_key agrees")
	}
	plain, _ := advisory.StringKey("order:1").Int64()
	spaced, _ := advisory.NamespacedKey("billing", "order:1").Int64()
	require.NotEqual(t, plain, spaced)
}

// PostgreSQL keeps the bigint and the (int, int) key spaces apart.
func TestInt64AndPairKeysAreDifferentLocks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	a, b := open(t, pool, nil), open(t, pool, nil)
	ctx := context.Background()
	require.NoError(t, a.TryLock(ctx, advisory.Int64Key(5)))
	require.NoError(t, b.TryLock(ctx, advisory.PairKey(0, 5)), "(0, 5) is not the bigint 5")
	require.ErrorIs(t, b.TryLock(ctx, advisory.Int64Key(5)), pglock.ErrLocked)
	require.ErrorIs(t, a.TryLock(ctx, advisory.PairKey(0, 5)), pglock.ErrLocked)
}

func TestExclusiveAndSharedAcrossSessions(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	key := advisory.StringKey("resource")
	tests := []struct {
		held, asked string
		granted     bool
	}{
		{"exclusive", "exclusive", false},
		{"exclusive", "shared", false},
		{"shared", "exclusive", false},
		{"shared", "shared", true},
	}
	for _, tt := range tests {
		t.Run(tt.held+" then "+tt.asked, func(t *testing.T) {
			ctx := context.Background()
			holder, asker := open(t, pool, nil), open(t, pool, nil)
			take := map[string]func(*advisory.Session) error{
				"exclusive": func(s *advisory.Session) error { return s.TryLock(ctx, key) },
				"shared":    func(s *advisory.Session) error { return s.TryRLock(ctx, key) },
			}
			require.NoError(t, take[tt.held](holder))
			err := take[tt.asked](asker)
			if tt.granted {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, pglock.ErrLocked)
		})
	}
}

func TestBlockingLockWaitsForUnlock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	holder, waiter := open(t, pool, nil), open(t, pool, nil)
	ctx := context.Background()
	key := advisory.StringKey("queue")
	require.NoError(t, holder.Lock(ctx, key))

	acquired := make(chan error)
	go func() { acquired <- waiter.Lock(ctx, key) }()
	testdb.WaitFor(t, func() bool {
		return slicesContains(advisoryLocks(t, pool), fmt.Sprintf("%d ExclusiveLock false", waiter.PID()))
	}, "the waiter waits on the server")
	select {
	case err := <-acquired:
		t.Fatalf("acquired while held: %v", err)
	default:
	}
	require.NoError(t, holder.Unlock(ctx, key))
	require.NoError(t, <-acquired)
	require.ErrorIs(t, holder.TryLock(ctx, key), pglock.ErrLocked)
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A canceled wait is canceled on the server too, and the session keeps its other locks.
func TestCanceledWaitLeavesNoServerSideWaiter(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	holder, waiter := open(t, pool, nil), open(t, pool, nil)
	ctx := context.Background()
	key := advisory.StringKey("busy")
	require.NoError(t, holder.Lock(ctx, key))
	require.NoError(t, waiter.Lock(ctx, advisory.StringKey("other")))

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- waiter.Lock(waitCtx, key) }()
	testdb.WaitFor(t, func() bool {
		return slicesContains(advisoryLocks(t, pool), fmt.Sprintf("%d ExclusiveLock false", waiter.PID()))
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NotContains(t, advisoryLocks(t, pool), fmt.Sprintf("%d ExclusiveLock false", waiter.PID()))
	require.NoError(t, waiter.Err(), "the session survives a canceled wait")
	require.ErrorIs(t, holder.TryLock(ctx, advisory.StringKey("other")), pglock.ErrLocked, "and keeps its other lock")

	deadlineCtx, cancelDeadline := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelDeadline()
	err := waiter.Lock(deadlineCtx, key)
	require.ErrorIs(t, err, pglock.ErrLockTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, waiter.Unlock(ctx, advisory.StringKey("other")), "statements after a cancel still run")
}

// Killing the session's backend is noticed by the health check, with no statement sent.
func TestTerminatedBackendIsSignalled(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	const interval = 200 * time.Millisecond
	s := open(t, pool, &advisory.Config{HealthCheckInterval: interval})
	ctx := context.Background()
	require.NoError(t, s.Lock(ctx, advisory.StringKey("job")))

	var terminated bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", s.PID()).Scan(&terminated))
	require.True(t, terminated)
	// Noticed with no statement of the test's: by the health check, due every interval (how
	// soon is the machine's to say, and not asserted).
	testdb.Receive(t, s.Lost())
	require.ErrorIs(t, s.Err(), pglock.ErrLockLost)
	require.ErrorIs(t, s.TryLock(ctx, advisory.StringKey("more")), pglock.ErrLockLost)
	require.NoError(t, s.Close(ctx))
}

// WithLock's function learns of a lost session through its context.
func TestWithLockCancelsTheFunctionWhenTheSessionIsLost(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	err := advisory.WithLock(ctx, pool, advisory.StringKey("report"), &advisory.Config{HealthCheckInterval: 100 * time.Millisecond},
		func(ctx context.Context) error {
			// Not under ctx: the loss it causes may cancel ctx before the answer is read.
			_, err := pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
			require.NoError(t, err)
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), pglock.ErrLockLost)
			return nil
		})
	require.ErrorIs(t, err, pglock.ErrLockLost)
	testdb.WaitFor(t, func() bool { return pool.Stat().AcquiredConns() == 0 },
		"the dead connection went back to the pool (which destroys it)")
}

func TestRelockingStacks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	s, other := open(t, pool, nil), open(t, pool, nil)
	ctx := context.Background()
	key := advisory.StringKey("stacked")
	require.NoError(t, s.Lock(ctx, key))
	require.NoError(t, s.TryLock(ctx, key), "the session may take its own lock again")
	require.NoError(t, s.Unlock(ctx, key))
	require.ErrorIs(t, other.TryLock(ctx, key), pglock.ErrLocked, "one hold is left")
	require.NoError(t, s.Unlock(ctx, key))
	require.NoError(t, other.TryLock(ctx, key))
	require.ErrorIs(t, s.Unlock(ctx, key), pglock.ErrNotHeld)
	require.ErrorIs(t, s.RUnlock(ctx, key), pglock.ErrNotHeld, "shared and exclusive are counted apart")
	require.NoError(t, s.Err())
}

// 10,000 cycles, a tenth of them with an unlock of a lock not held, leave no lock behind and
// no connection checked out of the pool.
func TestNoLeakOverManyCycles(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.NewPool(t, nil)
	ctx := context.Background()
	s := open(t, pool, nil)
	for i := range 10_000 {
		key := advisory.Int64Key(int64(i % 50))
		if i%2 == 0 {
			require.NoError(t, s.Lock(ctx, key))
		} else {
			require.NoError(t, s.TryRLock(ctx, key))
		}
		if i%10 == 0 {
			require.ErrorIs(t, s.Unlock(ctx, advisory.Int64Key(-1)), pglock.ErrNotHeld)
		}
		if i%2 == 0 {
			require.NoError(t, s.Unlock(ctx, key))
		} else {
			require.NoError(t, s.RUnlock(ctx, key))
		}
	}
	require.Empty(t, advisoryLocks(t, d.Pool))
	require.NoError(t, s.Close(ctx))
	require.Zero(t, pool.Stat().AcquiredConns())

	// An unlock that fails in the database (its backend was killed) loses the session; closing
	// it leaves nothing held and nothing checked out.
	doomed := open(t, pool, nil)
	require.NoError(t, doomed.Lock(ctx, advisory.Int64Key(7)))
	_, err := d.Pool.Exec(ctx, "SELECT pg_terminate_backend($1, 5000)", doomed.PID()) // waits until it is gone
	require.NoError(t, err)
	require.Error(t, doomed.Unlock(ctx, advisory.Int64Key(7)))
	require.ErrorIs(t, doomed.Err(), pglock.ErrLockLost)
	require.NoError(t, doomed.Close(ctx))
	require.Empty(t, advisoryLocks(t, d.Pool))
	testdb.WaitFor(t, func() bool { return pool.Stat().AcquiredConns() == 0 })

	// A session closed while holding locks frees them.
	held := open(t, pool, nil)
	for i := range 5 {
		require.NoError(t, held.Lock(ctx, advisory.Int64Key(int64(i))))
	}
	require.NoError(t, held.Close(ctx))
	require.Empty(t, advisoryLocks(t, d.Pool))
	require.Zero(t, pool.Stat().AcquiredConns())
}

// 2 pools (instances) × 8 goroutines increment a counter with a read and a separate write:
// only mutual exclusion keeps every increment.
func TestMutualExclusionAcrossInstances(t *testing.T) {
	t.Parallel()
	const instances, goroutines, rounds = 2, 8, 50
	d := testdb.New(t, nil)
	ctx := context.Background()
	_, err := d.Pool.Exec(ctx, "CREATE TABLE counter (n int NOT NULL); INSERT INTO counter VALUES (0)")
	require.NoError(t, err)
	key := advisory.StringKey("counter")
	var wg sync.WaitGroup
	for range instances {
		pool := d.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = 2 * goroutines })
		for range goroutines {
			wg.Go(func() {
				for range rounds {
					err := advisory.WithLock(ctx, pool, key, nil, func(ctx context.Context) error {
						var n int
						if err := pool.QueryRow(ctx, "SELECT n FROM counter").Scan(&n); err != nil {
							return err
						}
						_, err := pool.Exec(ctx, "UPDATE counter SET n = $1", n+1)
						return err
					})
					if err != nil {
						t.Errorf("WithLock: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	var n int
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT n FROM counter").Scan(&n))
	require.Equal(t, instances*goroutines*rounds, n)
}

func TestTransactionLocks(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	key := advisory.StringKey("xact")
	probe := open(t, pool, nil)
	free := func() bool {
		if err := probe.TryLock(ctx, key); err != nil {
			return false
		}
		require.NoError(t, probe.Unlock(ctx, key))
		return true
	}

	for _, end := range []string{"commit", "rollback"} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, advisory.XactLock(ctx, tx, key))
		require.False(t, free(), "held inside the transaction")
		if end == "commit" {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		require.True(t, free(), "released on %s", end)
	}

	boom := errors.New("boom")
	err := advisory.WithXactLock(ctx, pool, key, nil, func(ctx context.Context, tx pgx.Tx) error {
		require.ErrorIs(t, advisory.TryXactLock(ctx, mustBegin(t, pool), key), pglock.ErrLocked)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.True(t, free())

	require.NoError(t, advisory.WithXactLock(ctx, pool, key, nil, func(ctx context.Context, tx pgx.Tx) error {
		other := mustBegin(t, pool)
		require.NoError(t, advisory.TryRXactLock(ctx, other, advisory.StringKey("shared")))
		require.NoError(t, advisory.RXactLock(ctx, tx, advisory.StringKey("shared")), "shared with shared")
		_, err := other.Exec(ctx, "SET LOCAL lock_timeout = '50ms'")
		require.NoError(t, err)
		require.ErrorIs(t, advisory.XactLock(ctx, other, key), pglock.ErrLockTimeout, "lock_timeout maps to ErrLockTimeout")
		return nil
	}))
}

func mustBegin(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}

func TestBadInputHoldsNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	s := open(t, d.Pool, nil)
	for _, key := range []advisory.Key{advisory.StringKey(""), advisory.NamespacedKey("ns", ""), advisory.NamespacedKey("n\x00s", "x")} {
		require.ErrorIs(t, s.Lock(ctx, key), pglock.ErrInvalidName)
		require.ErrorIs(t, s.TryRLock(ctx, key), pglock.ErrInvalidName)
		require.ErrorIs(t, advisory.WithXactLock(ctx, d.Pool, key, nil, nil), pglock.ErrInvalidName)
		require.ErrorIs(t, advisory.WithLock(ctx, d.Pool, key, nil, nil), pglock.ErrInvalidName)
	}
	_, err := advisory.Open(ctx, nil, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	for field, cfg := range map[string]*advisory.Config{
		"HealthCheckInterval": {HealthCheckInterval: -time.Second},
		"KeepAlive":           {KeepAlive: -time.Second},
	} {
		_, err = advisory.Open(ctx, d.Pool, cfg)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		require.ErrorContains(t, err, "Config."+field)
	}
	require.ErrorIs(t, advisory.XactLock(ctx, nil, advisory.Int64Key(1)), pglock.ErrInvalidArgument)
	require.ErrorIs(t, advisory.WithXactLock(ctx, nil, advisory.Int64Key(1), nil, nil), pglock.ErrInvalidArgument)
	for _, idle := range []time.Duration{-time.Second, 25 * 24 * time.Hour} {
		err = advisory.WithXactLock(ctx, d.Pool, advisory.Int64Key(1), &advisory.XactOptions{IdleTimeout: idle}, nil)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
		require.ErrorContains(t, err, "XactOptions.IdleTimeout")
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Lock(canceled, advisory.Int64Key(1)), context.Canceled)
	require.Error(t, s.TryLock(canceled, advisory.Int64Key(1)))
	require.ErrorIs(t, advisory.WithLock(canceled, d.Pool, advisory.Int64Key(1), nil, nil), context.Canceled)
	require.Empty(t, advisoryLocks(t, d.Pool), "nothing is held after bad input")

	require.NoError(t, s.Close(ctx))
	require.ErrorIs(t, s.Lock(ctx, advisory.Int64Key(1)), pglock.ErrClosed)
}

// List shows who holds and who awaits each advisory lock, by name where one was registered.
func TestListShowsHoldersWaitersAndNames(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	app := func(name string) func(*pgxpool.Config) {
		return func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = name }
	}
	holder := open(t, d.NewPool(t, app("holder-app")), &advisory.Config{RegisterNames: true})
	waiter := open(t, d.NewPool(t, app("waiter-app")), nil)
	named := advisory.NamespacedKey("billing", "invoice:7")
	require.NoError(t, holder.Lock(ctx, named))
	require.NoError(t, holder.RLock(ctx, advisory.PairKey(3, -4)))
	require.NoError(t, holder.Lock(ctx, advisory.Int64Key(-1)))

	waitCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- waiter.Lock(waitCtx, named) }()
	defer func() { cancel(); <-done }()

	var locks []advisory.LockInfo
	testdb.WaitFor(t, func() bool {
		var err error
		locks, err = advisory.List(ctx, d.Pool)
		require.NoError(t, err)
		return len(locks) == 4
	})

	byKey := map[string]advisory.LockInfo{}
	for _, l := range locks {
		byKey[fmt.Sprint(l.Key, l.Granted)] = l
	}
	id, _ := named.Int64()
	held := byKey[fmt.Sprint(advisory.Int64Key(id), true)]
	require.Equal(t, "billing", held.Namespace)
	require.Equal(t, "invoice:7", held.Name)
	require.Equal(t, "exclusive", held.Mode)
	require.Equal(t, int32(holder.PID()), held.PID)
	require.Equal(t, "holder-app", held.ApplicationName)
	require.Equal(t, "127.0.0.1", held.ClientAddr)
	require.Greater(t, held.SessionAge, time.Duration(0))

	awaited := byKey[fmt.Sprint(advisory.Int64Key(id), false)]
	require.Equal(t, int32(waiter.PID()), awaited.PID)
	require.Equal(t, "waiter-app", awaited.ApplicationName)
	require.Equal(t, []int32{int32(holder.PID())}, awaited.BlockedBy, "who blocks whom")
	require.Equal(t, "invoice:7", awaited.Name)

	pair := byKey[fmt.Sprint(advisory.PairKey(3, -4), true)]
	require.Equal(t, "shared", pair.Mode, "a pair key, its negative half read back as such")
	minusOne := byKey[fmt.Sprint(advisory.Int64Key(-1), true)]
	require.Equal(t, "exclusive", minusOne.Mode, "a negative bigint key read back as such")
	require.Empty(t, minusOne.Name, "numbers have no name")
}
