package migrations_test

// The SQL contract as any language sees it: the functions called by their SQL text, as from psql.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
)

const (
	acquireSQL = "SELECT acquire_lock($1, $2, $3)"
	extendSQL  = "SELECT extend_lock($1, $2, $3)"
	releaseSQL = "SELECT release_lock($1, $2)"
	// waitSQL tries to acquire and, failing that, queues the holder for 30 s.
	waitSQL = "SELECT acquired FROM pglock_acquire($1, $2, 30000, '{}', 'test', true)"
)

// lockRow is a row of distributed_locks.
type lockRow struct {
	Name, Holder          string
	Token                 int64
	AcquiredAt, ExpiresAt time.Time
	Metadata              string
}

func readLocks(t *testing.T, pool *pgxpool.Pool) []lockRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT lock_name, holder_id, fencing_token,
		acquired_at, expires_at, metadata::text FROM distributed_locks ORDER BY lock_name`)
	require.NoError(t, err)
	locks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lockRow])
	require.NoError(t, err)
	return locks
}

func readLock(t *testing.T, pool *pgxpool.Pool, name string) (lockRow, bool) {
	t.Helper()
	for _, l := range readLocks(t, pool) {
		if l.Name == name {
			return l, true
		}
	}
	return lockRow{}, false
}

func callBool(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) bool {
	t.Helper()
	var ok bool
	require.NoError(t, q.QueryRow(context.Background(), sql, args...).Scan(&ok), sql)
	return ok
}

func TestContractHolderAndNonHolder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	const name = "order:1"

	type tokenChange int
	const (
		noRow tokenChange = iota
		sameToken
		newToken
	)
	steps := []struct {
		do         string
		sql        string
		args       []any
		want       bool
		holder     string // holder afterwards, "" for no row
		tokenAfter tokenChange
	}{
		{"h1 acquires a free lock", acquireSQL, []any{name, "h1", 30}, true, "h1", newToken},
		{"h2 cannot acquire it", acquireSQL, []any{name, "h2", 30}, false, "h1", sameToken},
		{"h1 re-acquires, keeping its token", acquireSQL, []any{name, "h1", 60}, true, "h1", sameToken},
		{"h2 cannot extend it", extendSQL, []any{name, "h2", 30}, false, "h1", sameToken},
		{"h1 extends it", extendSQL, []any{name, "h1", 30}, true, "h1", sameToken},
		{"h2 cannot release it", releaseSQL, []any{name, "h2"}, false, "h1", sameToken},
		{"h1 releases it", releaseSQL, []any{name, "h1"}, true, "", noRow},
		{"h1 cannot release it twice", releaseSQL, []any{name, "h1"}, false, "", noRow},
		{"h1 cannot extend a released lock", extendSQL, []any{name, "h1", 30}, false, "", noRow},
		{"h2 acquires the released lock with a higher token", acquireSQL, []any{name, "h2", 30}, true, "h2", newToken},
		{"h1 cannot acquire it now", acquireSQL, []any{name, "h1", 30}, false, "h2", sameToken},
	}

	var lastToken int64
	for _, step := range steps {
		require.Equal(t, step.want, callBool(t, pool, step.sql, step.args...), step.do)
		lock, found := readLock(t, pool, name)
		switch step.tokenAfter {
		case noRow:
			require.False(t, found, step.do)
			continue
		case sameToken:
			require.Equal(t, lastToken, lock.Token, step.do)
		case newToken:
			require.Greater(t, lock.Token, lastToken, step.do)
		}
		require.Equal(t, step.holder, lock.Holder, step.do)
		lastToken = lock.Token
	}
}

func TestContractAcquireReturnsHolderDetails(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()

	var acquired bool
	var holder, metadata string
	var token int64
	var acquiredAt, expiresAt time.Time
	scan := func(holderID string, ttlMs int, meta string) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT acquired, holder_id, fencing_token, acquired_at,
			expires_at, metadata::text FROM acquire_lock_ms($1, $2, $3, $4)`, "job", holderID, ttlMs, meta).
			Scan(&acquired, &holder, &token, &acquiredAt, &expiresAt, &metadata))
	}

	scan("h1", 1500, `{"host": "a"}`)
	require.True(t, acquired)
	require.Equal(t, "h1", holder)
	require.Equal(t, `{"host": "a"}`, metadata)
	require.InDelta(t, 1500*time.Millisecond, expiresAt.Sub(acquiredAt), float64(5*time.Millisecond),
		"a millisecond TTL is honoured to the millisecond")
	firstToken, firstAcquiredAt := token, acquiredAt

	scan("h2", 1000, `{"host": "b"}`)
	require.False(t, acquired, "a failed acquire returns the current holder's row")
	require.Equal(t, "h1", holder)
	require.Equal(t, firstToken, token)
	require.Equal(t, `{"host": "a"}`, metadata)

	scan("h1", 5000, `{"host": "a2"}`)
	require.True(t, acquired)
	require.Equal(t, firstToken, token, "re-acquiring keeps the token")
	require.Equal(t, firstAcquiredAt, acquiredAt, "re-acquiring keeps the time it was first acquired")
	require.Equal(t, `{"host": "a2"}`, metadata, "re-acquiring replaces the metadata")
}

func TestContractExpiryByDatabaseTime(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()

	require.True(t, callBool(t, pool, acquireSQL, "report", "h1", 2))
	first, _ := readLock(t, pool, "report")
	require.False(t, callBool(t, pool, acquireSQL, "report", "h2", 30), "not expired yet")

	testdb.WaitFor(t, func() bool {
		return callBool(t, pool, "SELECT clock_timestamp() > expires_at FROM distributed_locks WHERE lock_name = 'report'")
	})

	require.False(t, callBool(t, pool, extendSQL, "report", "h1", 30), "an expired lock cannot be extended")
	require.True(t, callBool(t, pool, acquireSQL, "report", "h2", 30), "an expired lock can be taken")
	second, _ := readLock(t, pool, "report")
	require.Greater(t, second.Token, first.Token)
	require.False(t, callBool(t, pool, releaseSQL, "report", "h1"), "the old holder cannot release it")

	// Leases count from the statement's clock_timestamp(), not from now(), the start of the
	// transaction: a lease taken late in a long transaction does not start already old.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT pg_sleep(1.2)")
	require.NoError(t, err)
	var acquired, live bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT a.acquired, a.expires_at > clock_timestamp()
		FROM acquire_lock_ms('late', 'h1', 1000) a`).Scan(&acquired, &live))
	require.True(t, acquired)
	require.True(t, live, "a 1 s lease taken 1.2 s into a transaction must not be born expired")
}

func TestContractConcurrentAcquireHasOneWinner(t *testing.T) {
	t.Parallel()
	const contenders, rounds = 32, 10
	d := testdb.New(t, nil)
	pool := d.NewPool(t, func(c *pgxpool.Config) { c.MaxConns = contenders; c.MinConns = contenders })

	for round := range rounds {
		name := fmt.Sprintf("free:%d", round)
		start := make(chan struct{})
		results := make(chan bool, contenders)
		errs := make(chan error, contenders)
		var wg sync.WaitGroup
		for i := range contenders {
			wg.Go(func() {
				<-start
				var ok bool
				err := pool.QueryRow(context.Background(), acquireSQL, name, fmt.Sprintf("h%d", i), 30).Scan(&ok)
				errs <- err
				results <- ok
			})
		}
		close(start)
		wg.Wait()
		close(results)
		close(errs)
		winners := 0
		for ok := range results {
			if ok {
				winners++
			}
		}
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 1, winners, "round %d", round)
	}
}

// Tokens strictly increase per name across every way a hold can end: release, expiry (even
// when the same holder takes the name again), and a row deleted from outside (force release).
func TestContractTokensStrictlyIncrease(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	endings := []string{
		"SELECT release_lock($1, $2)",
		"UPDATE distributed_locks SET expires_at = clock_timestamp() - interval '1 second' WHERE lock_name = $1 AND holder_id = $2",
		"DELETE FROM distributed_locks WHERE lock_name = $1 AND holder_id = $2",
	}

	var last int64
	for i := range 1000 {
		// h1, h1, h2, h2, ...: a holder also takes the name back after its own hold ended,
		// by each of the three endings, and must get a new token every time.
		holder := []string{"h1", "h2"}[(i/2)%2]
		var token int64
		require.NoError(t, pool.QueryRow(ctx,
			"SELECT fencing_token FROM acquire_lock_ms('alternating', $1, 30000) WHERE acquired", holder).Scan(&token))
		require.Greater(t, token, last, "acquisition %d", i)
		last = token
		_, err := pool.Exec(ctx, endings[i%len(endings)], "alternating", holder)
		require.NoError(t, err)
	}
}

// An acquirer that stalls before its row lands must not end up with a smaller token than a
// holder who came and went meanwhile: the token is drawn once the row is ours. A BEFORE INSERT
// trigger parks the "slow" holder's insert on an advisory lock the test holds.
func TestContractTokenIsDrawnAfterTheRowIsOurs(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE FUNCTION park_slow_holder() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.holder_id = 'slow' THEN
				PERFORM pg_advisory_lock(4242);
				PERFORM pg_advisory_unlock(4242);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER park_slow_holder BEFORE INSERT ON distributed_locks
			FOR EACH ROW EXECUTE FUNCTION park_slow_holder();`)
	require.NoError(t, err)

	gate, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	_, err = gate.Exec(ctx, "SELECT pg_advisory_lock(4242)")
	require.NoError(t, err)

	slowToken := make(chan int64, 1)
	slowErr := make(chan error, 1)
	go func() {
		var token int64
		err := pool.QueryRow(ctx, "SELECT fencing_token FROM acquire_lock_ms('contended', 'slow', 30000) WHERE acquired").Scan(&token)
		slowErr <- err
		slowToken <- token
	}()
	testdb.WaitFor(t, func() bool {
		return callBool(t, pool, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`)
	}, "the slow holder's insert is parked")

	var fastToken int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT fencing_token FROM acquire_lock_ms('contended', 'fast', 30000) WHERE acquired").Scan(&fastToken))
	require.True(t, callBool(t, pool, releaseSQL, "contended", "fast"))

	_, err = gate.Exec(ctx, "SELECT pg_advisory_unlock(4242)")
	require.NoError(t, err)
	require.NoError(t, <-slowErr)
	require.Greater(t, <-slowToken, fastToken, "the holder whose row landed last has the larger token")
}

// takeSQL takes places of a semaphore, queuing: name, places, permits, key, per_key, ttl_ms.
const takeSQL = `SELECT * FROM pglock_semaphore_take($1, 'h', $2, $3, $4, $5, $6, '{}', 'i', true)`

// takeAllSQL is a combined acquisition, queuing: names, places, permits, keys, per_keys.
const takeAllSQL = `SELECT * FROM pglock_take_all('h', $1::varchar[], $2::integer[], $3::integer[], $4::varchar[], $5::integer[],
	1000, '{}', 'i', true)`

func TestContractBadInputRaises22023AndChangesNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, acquireSQL, "held", "h1", 30))
	long := strings.Repeat("x", 256)

	tests := []struct {
		sql   string
		args  []any
		param string
	}{
		{acquireSQL, []any{nil, "h", 30}, "p_lock_name"},
		{acquireSQL, []any{"", "h", 30}, "p_lock_name"},
		{acquireSQL, []any{long, "h", 30}, "p_lock_name"},
		{acquireSQL, []any{"n", nil, 30}, "p_holder_id"},
		{acquireSQL, []any{"n", "", 30}, "p_holder_id"},
		{acquireSQL, []any{"n", long, 30}, "p_holder_id"},
		{acquireSQL, []any{"n", "h", 0}, "p_ttl_seconds"},
		{acquireSQL, []any{"n", "h", -5}, "p_ttl_seconds"},
		{acquireSQL, []any{"n", "h", nil}, "p_ttl_seconds"},
		{acquireSQL, []any{"n", "h", 86401}, "p_ttl_seconds"},
		{"SELECT * FROM acquire_lock_ms($1, $2, $3)", []any{"n", "h", int64(1) << 62}, "p_ttl_ms"},
		{"SELECT acquire_lock($1, $2, $3, $4)", []any{"n", "h", 30, `[1, 2]`}, "p_metadata"},
		{"SELECT * FROM acquire_lock_ms($1, $2, $3)", []any{"n", "h", 0}, "p_ttl_ms"},
		{"SELECT * FROM acquire_lock_ms($1, $2, $3)", []any{"n", "h", 99}, "p_ttl_ms"}, // one minimum for every lease: 100 ms
		{"SELECT pglock_attempt($1, $2, $3)", []any{"n", "h", 99}, "p_ttl_ms"},
		{"SELECT * FROM acquire_lock_ms($1, $2, $3)", []any{"", "h", 1000}, "p_lock_name"},
		{extendSQL, []any{"held", "h1", 0}, "p_ttl_seconds"},
		{extendSQL, []any{nil, "h1", 30}, "p_lock_name"},
		{"SELECT extend_lock_ms($1, $2, $3)", []any{"held", "h1", -1}, "p_ttl_ms"},
		{"SELECT extend_lock_ms($1, $2, $3)", []any{"held", "h1", 99}, "p_ttl_ms"},
		{"SELECT extend_lock_ms($1, $2, $3)", []any{"held", "h1", 86400001}, "p_ttl_ms"},
		{"SELECT extend_lock_ms($1, $2, $3)", []any{"held", "", 1000}, "p_holder_id"},
		{releaseSQL, []any{"", "h1"}, "p_lock_name"},
		{releaseSQL, []any{"held", nil}, "p_holder_id"},
		{releaseSQL, []any{long, "h1"}, "p_lock_name"},
		{takeSQL, []any{"s/t", 1, 2, "", nil, 1000}, "p_name"},
		{takeSQL, []any{"s", 1, 0, "", nil, 1000}, "p_permits"},
		{takeSQL, []any{"s", 0, 2, "", nil, 1000}, "p_places"},
		{takeSQL, []any{"s", 3, 2, "", nil, 1000}, "p_places"},
		{takeSQL, []any{"s", nil, 2, "", nil, 1000}, "p_places"},
		{takeSQL, []any{"s", 2, 4, "", 1, 1000}, "p_places"},
		{takeSQL, []any{"s", 1, 4, "", 0, 1000}, "p_per_key"},
		{takeSQL, []any{"s", 1, 4, nil, nil, 1000}, "p_key"},
		{takeSQL, []any{"s", 1, 4, long, nil, 1000}, "p_key"},
		{takeSQL, []any{"s", 1, 4, "", nil, 99}, "p_ttl_ms"},
		{takeAllSQL, []any{nil, nil, nil, nil, nil}, "p_names"},
		{takeAllSQL, []any{[]string{}, []any{}, []any{}, []any{}, []any{}}, "p_names"},
		{takeAllSQL, []any{[]string{"a", "b"}, []any{nil}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}}, "p_places"},
		{takeAllSQL, []any{[]any{"a", nil}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}}, "p_names"},
		{takeAllSQL, []any{[]string{"a", "a"}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}}, "p_names"},
		{takeAllSQL, []any{[]string{"s", "s"}, []any{1, 1}, []any{2, 3}, []any{"", ""}, []any{nil, nil}}, "p_names"},
		{takeAllSQL, []any{[]string{"pglock.semaphore/s/h"}, []any{nil}, []any{nil}, []any{nil}, []any{nil}}, "p_names"},
		// The free lock "aa" comes first: taken, then undone with the statement.
		{takeAllSQL, []any{[]string{"aa", "zz"}, []any{nil, 3}, []any{nil, 2}, []any{nil, ""}, []any{nil, nil}}, "p_places"},
		{takeAllSQL, []any{[]string{"aa", ""}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}, []any{nil, nil}}, "p_lock_name"},
	}
	for _, tt := range tests {
		function, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(tt.sql, "SELECT * FROM "), "SELECT "), "(")
		t.Run(function+" "+tt.param, func(t *testing.T) {
			before := readLocks(t, pool)
			_, err := pool.Exec(ctx, tt.sql, tt.args...)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
			require.Equal(t, "22023", pgErr.Code)
			require.True(t, strings.HasPrefix(pgErr.Message, tt.param+":"), "message %q names %s", pgErr.Message, tt.param)
			require.Equal(t, before, readLocks(t, pool))
		})
	}
	require.True(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms($1, $2, $3)", "shortest", "h", 100),
		"100 ms, the shortest lease, is taken")
}

func TestContractFailedAcquireWritesNothing(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, acquireSQL, "held", "h1", 30))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.False(t, callBool(t, tx, acquireSQL, "held", "h2", 30))
	require.False(t, callBool(t, tx, extendSQL, "held", "h2", 30))
	require.False(t, callBool(t, tx, releaseSQL, "held", "h2"))
	require.True(t, callBool(t, tx, "SELECT txid_current_if_assigned() IS NULL"),
		"no transaction id was taken, so no row was locked and no commit will be flushed")
}

func TestContractReleaseNotifiesWaiters(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN pglock_released")
	require.NoError(t, err)

	require.True(t, callBool(t, pool, acquireSQL, "a", "h1", 30))
	require.True(t, callBool(t, pool, acquireSQL, "b", "h1", 30))
	require.False(t, callBool(t, pool, releaseSQL, "a", "h2"), "a failed release notifies nobody")
	require.True(t, callBool(t, pool, releaseSQL, "b", "h1"))

	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "pglock_released", n.Channel)
	require.Equal(t, "b", n.Payload)
}

// A role with only EXECUTE on the functions and SELECT on the table can use every function,
// and cannot write the table itself.
func TestContractLeastPrivilegeRole(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.Pool
	ctx := context.Background()
	role, none := d.NewRole(t, "pglock_app"), d.NewRole(t, "pglock_none")
	_, err := pool.Exec(ctx, fmt.Sprintf(`GRANT USAGE ON SCHEMA public TO %[1]s, %[2]s;
		GRANT SELECT ON distributed_locks TO %[1]s;
		GRANT EXECUTE ON FUNCTION acquire_lock(varchar, varchar, integer, jsonb), acquire_lock_ms(varchar, varchar, bigint, jsonb),
			extend_lock(varchar, varchar, integer), extend_lock_ms(varchar, varchar, bigint), release_lock(varchar, varchar),
			pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean),
			pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean), pglock_release(varchar, varchar),
			verify_fence(varchar, bigint) TO %[1]s`, role, none))
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	defer conn.Exec(ctx, "RESET ROLE")
	_, err = conn.Exec(ctx, "SET ROLE "+role)
	require.NoError(t, err)

	require.True(t, callBool(t, conn, acquireSQL, "app", "h1", 30))
	require.True(t, callBool(t, conn, extendSQL, "app", "h1", 30))
	var token int64
	require.NoError(t, conn.QueryRow(ctx, "SELECT fencing_token FROM distributed_locks WHERE lock_name = 'app'").Scan(&token))
	require.True(t, callBool(t, conn, "SELECT verify_fence('app', $1)", token), "verify_fence takes FOR SHARE with only SELECT granted")
	require.False(t, callBool(t, conn, "SELECT acquired FROM pglock_attempt($1, $2, 30000)", "app", "h2"),
		"the try Go sends, granted as docs/sql.md says")
	require.False(t, callBool(t, conn, waitSQL, "app", "h2"), "queueing needs no table privilege")
	require.True(t, callBool(t, conn, releaseSQL, "app", "h1"), "and the handoff neither")
	require.True(t, callBool(t, conn, releaseSQL, "app", "h2"))

	for _, write := range []string{
		"INSERT INTO distributed_locks VALUES ('x', 'h', 1, now(), now(), '{}')",
		"UPDATE distributed_locks SET holder_id = 'thief'",
		"DELETE FROM distributed_locks",
		"SELECT nextval('distributed_locks_fencing_token_seq')",
		"DELETE FROM distributed_lock_waiters",
	} {
		_, err := conn.Exec(ctx, write)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), write)
		require.Equal(t, "42501", pgErr.Code, write) // insufficient_privilege
	}

	_, err = conn.Exec(ctx, "SET ROLE "+none)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, acquireSQL, "app", "h1", 30)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr))
	require.Equal(t, "42501", pgErr.Code, "a role never granted EXECUTE cannot call the functions")
}

// The functions are SECURITY DEFINER: a caller's temporary table must not stand in for ours.
func TestContractTemporaryTableCannotShadowTheLockTable(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "CREATE TEMPORARY TABLE distributed_locks (LIKE public.distributed_locks INCLUDING ALL)")
	require.NoError(t, err)

	require.True(t, callBool(t, conn, acquireSQL, "real", "h1", 30))
	var inTemp int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_temp.distributed_locks").Scan(&inTemp))
	require.Zero(t, inTemp)
	_, found := readLock(t, pool, "real")
	require.True(t, found)
}

// Waiters queue in order, each release hands the lock straight to the next live one with a new
// token (one commit, NOTIFY pglock_handoff naming it), and the last release frees it.
func TestContractReleaseHandsOffToWaitersInOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN pglock_handoff; LISTEN pglock_released")
	require.NoError(t, err)

	require.True(t, callBool(t, pool, waitSQL, "q", "h1"))
	first, _ := readLock(t, pool, "q")
	for _, waiter := range []string{"h2", "h3", "h4"} {
		require.False(t, callBool(t, pool, waitSQL, "q", waiter))
	}
	require.False(t, callBool(t, pool, acquireSQL, "q", "seed", 30), "a caller that does not queue cannot jump it")

	last := first.Token
	for i, next := range []string{"h2", "h3", "h4"} {
		holder := []string{"h1", "h2", "h3"}[i]
		require.True(t, callBool(t, pool, releaseSQL, "q", holder))
		lock, found := readLock(t, pool, "q")
		require.True(t, found)
		require.Equal(t, next, lock.Holder)
		require.Greater(t, lock.Token, last)
		last = lock.Token

		n, err := listener.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, "pglock_handoff", n.Channel)
		var handoff struct {
			LockName     string    `json:"lock_name"`
			HolderID     string    `json:"holder_id"`
			FencingToken int64     `json:"fencing_token"`
			ExpiresAt    time.Time `json:"expires_at"`
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &handoff), n.Payload)
		require.Equal(t, "q", handoff.LockName)
		require.Equal(t, next, handoff.HolderID)
		require.Equal(t, lock.Token, handoff.FencingToken)
		require.True(t, lock.ExpiresAt.Equal(handoff.ExpiresAt), "%v != %v", lock.ExpiresAt, handoff.ExpiresAt)
	}
	require.True(t, callBool(t, pool, releaseSQL, "q", "h4"))
	_, found := readLock(t, pool, "q")
	require.False(t, found, "with nobody waiting the lock is freed")
	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "pglock_released", n.Channel)
	require.Equal(t, "q", n.Payload)
}

// A lock that expired while someone waits is kept for the first waiter; a waiter that gives up
// (release_lock on a lock it does not hold) leaves the queue.
func TestContractFreeLockIsKeptForTheFirstWaiter(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, waitSQL, "r", "holder"))
	require.False(t, callBool(t, pool, waitSQL, "r", "gives-up"))
	require.False(t, callBool(t, pool, waitSQL, "r", "first"))
	require.False(t, callBool(t, pool, releaseSQL, "r", "gives-up"), "it does not hold the lock")
	_, err := pool.Exec(ctx, "UPDATE distributed_locks SET expires_at = clock_timestamp() WHERE lock_name = 'r'")
	require.NoError(t, err)

	var acquired bool
	var holder string
	require.NoError(t, pool.QueryRow(ctx, "SELECT acquired, holder_id FROM pglock_acquire('r', 'latecomer', 30000)").Scan(&acquired, &holder))
	require.False(t, acquired)
	require.Equal(t, "first", holder, "the answer names the waiter the lock is kept for")
	require.True(t, callBool(t, pool, waitSQL, "r", "first"))
	var waiters int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM distributed_lock_waiters").Scan(&waiters))
	require.Zero(t, waiters)
}

// Repeated polls by a waiter whose place is fresh write nothing.
func TestContractWaitingPollIsReadOnly(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, waitSQL, "p", "holder"))
	require.False(t, callBool(t, pool, waitSQL, "p", "waiter"))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var queued bool
	require.NoError(t, tx.QueryRow(ctx, "SELECT queued FROM pglock_acquire('p', 'waiter', 30000, '{}', 'test', true)").Scan(&queued))
	require.False(t, queued)
	require.True(t, callBool(t, tx, "SELECT txid_current_if_assigned() IS NULL"))
}

// verify_fence keeps the lock as it is until the verifying transaction ends.
func TestContractVerifyFenceHoldsUntilCommit(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, acquireSQL, "f", "h1", 30))
	lock, _ := readLock(t, pool, "f")
	require.False(t, callBool(t, pool, "SELECT verify_fence('f', $1)", lock.Token-1), "a stale token")
	require.False(t, callBool(t, pool, "SELECT verify_fence('g', $1)", lock.Token), "another name")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.True(t, callBool(t, tx, "SELECT verify_fence('f', $1)", lock.Token))

	other, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, "SET lock_timeout = '100ms'")
	require.NoError(t, err)
	defer other.Exec(ctx, "RESET lock_timeout")
	for _, change := range []string{releaseSQL, "DELETE FROM distributed_locks WHERE lock_name = $1 AND holder_id = $2"} {
		_, err = other.Exec(ctx, change, "f", "h1")
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), change)
		require.Equal(t, "55P03", pgErr.Code, "%s waits for the fenced transaction", change) // lock_not_available
	}

	require.NoError(t, tx.Commit(ctx))
	require.True(t, callBool(t, other, releaseSQL, "f", "h1"))
	require.False(t, callBool(t, pool, "SELECT verify_fence('f', $1)", lock.Token))
}

// pglock_fence is verify_fence that bounds the rest of the transaction to the lease's remaining
// time plus the grace: it returns the expiry, sets both timeouts as SET LOCAL would, holds the
// row FOR SHARE, and for a stale token or a bad grace changes nothing.
func TestContractFenceBoundsTheTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, acquireSQL, "f", "h1", 30))
	lock, _ := readLock(t, pool, "f")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var stale *time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT pglock_fence('f', $1, 500)", lock.Token-1).Scan(&stale))
	require.Nil(t, stale, "a stale token")
	var idle, statement string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('statement_timeout')").Scan(&idle, &statement))
	require.Equal(t, []string{"0", "0"}, []string{idle, statement}, "nothing set for a stale token")

	var expiresAt time.Time
	var boundMs int64
	require.NoError(t, tx.QueryRow(ctx, "SELECT pglock_fence('f', $1, 500)", lock.Token).Scan(&expiresAt))
	require.NoError(t, tx.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&boundMs))
	require.Equal(t, lock.ExpiresAt, expiresAt)
	// The lease's time left when the fence ran (more than is left now, read after it), plus
	// the grace: however long a busy machine took between the acquisition and the fence.
	var leftNowMs int64
	require.NoError(t, tx.QueryRow(ctx, "SELECT (extract(epoch FROM $1 - clock_timestamp()) * 1000)::bigint", expiresAt).Scan(&leftNowMs))
	require.GreaterOrEqual(t, boundMs, leftNowMs+500, "the lease's time left, plus the grace")
	require.LessOrEqual(t, boundMs, int64(30_000+500+1))
	var statementMs int64
	require.NoError(t, tx.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'").Scan(&statementMs))
	require.Equal(t, boundMs, statementMs)
	other, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.Exec(ctx, "SET lock_timeout = '100ms'; SELECT release_lock('f', 'h1')")
	var held *pgconn.PgError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "55P03", held.Code, "the release waits for the fenced transaction") // lock_not_available
	_, err = other.Exec(ctx, "RESET lock_timeout")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&statement))
	require.Equal(t, "0", statement, "local to the transaction")

	// A stricter limit already in force, the caller's or an earlier fence's, stays.
	require.True(t, callBool(t, pool, acquireSQL, "short", "h2", 5))
	short, _ := readLock(t, pool, "short")
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL statement_timeout = '300ms'")
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, "SELECT pglock_fence('short', $1, 0)", short.Token).Scan(&expiresAt))
	require.NoError(t, tx.QueryRow(ctx, "SELECT pglock_fence('f', $1, 0)", lock.Token).Scan(&expiresAt))
	require.NoError(t, tx.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'").Scan(&statementMs))
	require.EqualValues(t, 300, statementMs, "the caller's stricter statement_timeout")
	require.NoError(t, tx.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'").Scan(&boundMs))
	require.LessOrEqual(t, boundMs, int64(5_000+1), "the short lock's bound, not the 30 s lock's fenced after it")
	require.NoError(t, tx.Rollback(ctx))

	for _, grace := range []any{-1, nil, 86_400_001} {
		_, err := pool.Exec(ctx, "SELECT pglock_fence('f', $1, $2)", lock.Token, grace)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, []string{"22023", "p_grace_ms"}, []string{pgErr.Code, pgErr.ColumnName}, "grace %v", grace)
	}
}

// A holder can have a place in the queue of its own lock: its poll may write one just as a
// release hands it the lock. Its release must neither hand the lock to itself nor leave it.
func TestContractReleaserLeavesTheQueue(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, waitSQL, "s", "h1"))
	_, err := pool.Exec(ctx, `INSERT INTO distributed_lock_waiters (lock_name, holder_id, ttl_ms, enqueued_at, expires_at)
		VALUES ('s', 'h1', 30000, clock_timestamp(), clock_timestamp() + interval '30 seconds')`)
	require.NoError(t, err)
	require.True(t, callBool(t, pool, releaseSQL, "s", "h1"))
	_, found := readLock(t, pool, "s")
	require.False(t, found, "not handed back to the releaser")
	var waiters int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM distributed_lock_waiters").Scan(&waiters))
	require.Zero(t, waiters)
}

// A waiter gives up (release_lock on a lock it does not hold) just as the holder's release hands
// it the lock: its release waits for the handoff's commit and must then release what it was
// handed, passing the lock on, rather than answer that it held nothing.
func TestContractWaiterGivingUpDuringAHandoffToItReleasesTheLock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.True(t, callBool(t, pool, waitSQL, "w", "holder"))
	require.False(t, callBool(t, pool, waitSQL, "w", "gives-up"))
	require.False(t, callBool(t, pool, waitSQL, "w", "next"))

	handoff, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer handoff.Rollback(ctx)
	require.True(t, callBool(t, handoff, releaseSQL, "w", "holder"), "handed to gives-up, not yet committed")

	givingUp := releaseBehindARowLock(t, ctx, pool, "w", "gives-up")
	require.NoError(t, handoff.Commit(ctx))

	require.True(t, givingUp(), "it released the lock it was handed")
	lock, found := readLock(t, pool, "w")
	require.True(t, found)
	require.Equal(t, "next", lock.Holder, "and handed it on")
}

// A waiter that queues while the holder's release waits for the lock row (here behind the
// holder's own fenced transaction) is handed the lock when the release goes ahead.
func TestContractReleaseHandsOffToAWaiterThatQueuedWhileItWaited(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.True(t, callBool(t, pool, waitSQL, "v", "holder"))
	lock, _ := readLock(t, pool, "v")

	fenced, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer fenced.Rollback(ctx)
	require.True(t, callBool(t, fenced, "SELECT verify_fence('v', $1)", lock.Token))

	released := releaseBehindARowLock(t, ctx, pool, "v", "holder")
	require.False(t, callBool(t, pool, waitSQL, "v", "waiter"), "queued")
	require.NoError(t, fenced.Commit(ctx))

	require.True(t, released())
	next, found := readLock(t, pool, "v")
	require.True(t, found, "handed off, not freed")
	require.Equal(t, "waiter", next.Holder)
	require.Greater(t, next.Token, lock.Token)
}

// A release hands the lock to the first live waiter even while another statement holds that
// waiter's place (the places Set renewing it, here in a transaction held open): it waits for
// that statement, rather than pass the waiter over and free the lock to whoever asks next. A
// waiter that leaves meanwhile is passed over for the next. The wait is bounded by the caller's
// lock_timeout, or 250 ms without one: a place held longer is passed over, as it always was,
// and the release does not stall.
func TestContractReleaseWaitsBrieflyForTheFirstWaitersPlace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, lockTimeout, meanwhile, answer, next string
	}{
		{"its place is renewed", "30s", `SELECT outcome FROM pglock_wait_many(ARRAY['k'], ARRAY['first'], ARRAY[30000::bigint])`, "kept", "first"},
		// A waiter leaving is no release of a lock it held.
		{"it leaves", "30s", `SELECT released::text FROM pglock_release('k', 'first')`, "false", "second"},
		{"its place is held past the bound", "0", `SELECT outcome FROM pglock_wait_many(ARRAY['k'], ARRAY['first'], ARRAY[30000::bigint])`, "kept", "second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t, nil).Pool
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.True(t, callBool(t, pool, waitSQL, "k", "holder"))
			require.False(t, callBool(t, pool, waitSQL, "k", "first"))
			require.False(t, callBool(t, pool, waitSQL, "k", "second"))

			meanwhile, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer meanwhile.Rollback(ctx)
			var answer string
			require.NoError(t, meanwhile.QueryRow(ctx, tc.meanwhile).Scan(&answer))
			require.Equal(t, tc.answer, answer)

			released := make(chan error, 1)
			go func() {
				released <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", tc.lockTimeout); err != nil {
						return err
					}
					var ok bool
					if err := tx.QueryRow(ctx, releaseSQL, "k", "holder").Scan(&ok); err != nil || !ok {
						return fmt.Errorf("release: %v, %w", ok, err)
					}
					return nil
				})
			}()
			if tc.next == "first" || tc.name == "it leaves" {
				testdb.WaitFor(t, func() bool {
					return callBool(t, pool, `SELECT EXISTS (SELECT FROM pg_stat_activity
						WHERE datname = current_database() AND query = $1 AND wait_event_type = 'Lock')`, releaseSQL)
				}, "the release waits for the place")
				require.False(t, callBool(t, pool, acquireSQL, "k", "latecomer", 30), "the lock is not free meanwhile")
				require.NoError(t, meanwhile.Commit(ctx))
			}
			require.NoError(t, testdb.Receive(t, released), "released, the place held or not")
			lock, found := readLock(t, pool, "k")
			require.True(t, found, "handed off, not freed")
			require.Equal(t, tc.next, lock.Holder)
		})
	}
}

// releaseBehindARowLock starts release_lock(name, holder) and returns once it waits for a row
// lock another transaction of the test holds; the function it returns gives its answer.
func releaseBehindARowLock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name, holder string) func() bool {
	t.Helper()
	released := make(chan bool, 1)
	errs := make(chan error, 1)
	go func() {
		var ok bool
		errs <- pool.QueryRow(ctx, releaseSQL, name, holder).Scan(&ok)
		released <- ok
	}()
	testdb.WaitFor(t, func() bool {
		return callBool(t, pool, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND query = $1 AND wait_event_type = 'Lock')`, releaseSQL)
	}, "the release waits for a row lock")
	return func() bool {
		t.Helper()
		require.NoError(t, <-errs)
		return <-released
	}
}

// The batch renewals answer a row per lease, in the order given: renewed with its new expiry
// by its own TTL, gone, or busy (another transaction has its row locked: passed over, not
// waited for); bad input renews nothing.
func TestContractRenewManyRenewsEachLeaseOrSaysItIsGoneOrBusy(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	for _, l := range []struct{ name, holder string }{{"a", "h1"}, {"b", "h2"}, {"expired", "h3"}, {"fenced", "h4"}} {
		require.True(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms($1, $2, 1000)", l.name, l.holder))
	}
	_, err := pool.Exec(ctx, "UPDATE distributed_locks SET expires_at = clock_timestamp() - interval '1 ms' WHERE lock_name = 'expired'")
	require.NoError(t, err)
	fence, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer fence.Rollback(ctx)
	require.True(t, callBool(t, fence, "SELECT verify_fence('fenced', fencing_token) FROM distributed_locks WHERE lock_name = 'fenced'"))

	rows, err := pool.Query(ctx, `SELECT r.lock_name, r.holder_id, r.outcome, r.expires_at - clock_timestamp()
		FROM pglock_renew_many($1, $2, $3) AS r`,
		[]string{"b", "a", "expired", "a", "nobody", "fenced"}, []string{"h2", "h1", "h3", "not-h1", "h", "h4"},
		[]int64{60_000, 30_000, 30_000, 30_000, 30_000, 30_000})
	require.NoError(t, err)
	type outcome struct {
		Name, Holder, Outcome string
		Left                  *time.Duration
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outcome])
	require.NoError(t, err)
	require.Len(t, got, 6)
	for i, want := range []struct {
		name, holder, outcome string
		ttl                   time.Duration
	}{
		{"b", "h2", "renewed", time.Minute}, {"a", "h1", "renewed", 30 * time.Second}, {"expired", "h3", "gone", 0},
		{"a", "not-h1", "gone", 0}, {"nobody", "h", "gone", 0}, {"fenced", "h4", "busy", 0},
	} {
		require.Equal(t, []string{want.name, want.holder, want.outcome}, []string{got[i].Name, got[i].Holder, got[i].Outcome}, "row %d", i)
		if want.ttl == 0 {
			require.Nil(t, got[i].Left, "row %d: not renewed", i)
			continue
		}
		require.NotNil(t, got[i].Left, "row %d: renewed", i)
		require.InDelta(t, want.ttl, *got[i].Left, float64(time.Second), "row %d: its own TTL", i)
	}
	expired, _ := readLock(t, pool, "expired")
	require.True(t, expired.ExpiresAt.Before(time.Now()), "an expired lease is not revived")
	require.NoError(t, fence.Rollback(ctx))
	require.Equal(t, "renewed", callText(t, pool, "SELECT outcome FROM pglock_renew_many('{fenced}', '{h4}', '{30000}')"),
		"once the fence's transaction ends")

	var none int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pglock_job_renew_many($1, $2, $3, $4) WHERE outcome = 'gone'",
		[]string{"s"}, []string{"k"}, []int64{1}, []int64{1000}).Scan(&none))
	require.Equal(t, 1, none, "an attempt that does not exist is gone")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pglock_cron_renew_many($1, $2, $3) WHERE outcome = 'gone'",
		[]int64{1, 2}, []int64{1, 2}, []int64{1000, 1000}).Scan(&none))
	require.Equal(t, 2, none, "runs that do not exist are gone")

	const (
		locks = "SELECT * FROM pglock_renew_many($1, $2, $3)"
		jobs  = "SELECT * FROM pglock_job_renew_many($1, $2, $3, $4)"
		cron  = "SELECT * FROM pglock_cron_renew_many($1, $2, $3)"
	)
	one, two := []string{"a"}, []string{"a", "b"}
	for _, tt := range []struct {
		sql   string
		args  []any
		param string
	}{
		{locks, []any{one, two, []int64{1000}}, "p_holder_ids"},
		{locks, []any{one, []string{"h1"}, []int64{1000, 1000}}, "p_ttl_ms"},
		{locks, []any{nil, []string{"h1"}, []int64{1000}}, "p_lock_names"},
		{locks, []any{two, []string{"h1", "h2"}, []int64{1000, 99}}, "p_ttl_ms"},
		{locks, []any{two, []string{"h1", ""}, []int64{1000, 1000}}, "p_holder_id"},
		{locks, []any{[]string{"a", strings.Repeat("x", 256)}, []string{"h1", "h2"}, []int64{1000, 1000}}, "p_lock_name"},
		{jobs, []any{one, two, []int64{1}, []int64{1000}}, "p_keys"},
		{jobs, []any{one, one, []int64{1}, []int64{0}}, "p_ttl_ms"},
		{cron, []any{[]int64{1}, nil, []int64{1000}}, "p_fencing_tokens"},
		{cron, []any{[]int64{1}, []int64{1}, []int64{86_400_001}}, "p_ttl_ms"},
	} {
		function, _, _ := strings.Cut(strings.TrimPrefix(tt.sql, "SELECT * FROM "), "(")
		t.Run(function+" "+tt.param, func(t *testing.T) {
			before := readLocks(t, pool)
			_, err := pool.Exec(ctx, tt.sql, tt.args...)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
			require.Equal(t, []string{"22023", tt.param}, []string{pgErr.Code, pgErr.ColumnName}, pgErr.Message)
			require.Equal(t, before, readLocks(t, pool), "nothing renewed")
		})
	}
}

// pglock_release_after puts a release off until the lock has been held that long since it was
// taken, by the database's clock, whatever the lease's end was; releases at once after that;
// answers released = false to a non-holder; and refuses a held time that is not positive.
func TestContractReleaseAfterKeepsTheLockUntilHeldThatLong(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t, nil).Pool
	ctx := context.Background()
	require.True(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms('job', 'h1', 1000)"))
	taken, _ := readLock(t, pool, "job")

	type answer struct {
		Released, HandedOff bool
		ExpiresAt           *time.Time
	}
	releaseAfter := func(holder string, heldMs int64) answer {
		t.Helper()
		rows, err := pool.Query(ctx, "SELECT * FROM pglock_release_after('job', $1, $2)", holder, heldMs)
		require.NoError(t, err)
		got, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[answer])
		require.NoError(t, err)
		return got
	}
	require.Equal(t, answer{}, releaseAfter("not-h1", 60_000), "a non-holder releases nothing")
	put := releaseAfter("h1", 60_000)
	require.True(t, put.Released)
	require.NotNil(t, put.ExpiresAt)
	require.True(t, taken.AcquiredAt.Add(time.Minute).Equal(*put.ExpiresAt), "held a minute from its acquisition, past its 1 s lease")
	require.False(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms('job', 'h2', 1000)"), "nobody takes it before")
	var renewed *time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT extend_lock_ms('job', 'h1', 5000)").Scan(&renewed))
	require.Nil(t, renewed, "a renewal of the holder's, as one in flight, no longer moves the end")
	require.Equal(t, put, releaseAfter("h1", 60_000), "a second call answers the same")
	still, _ := readLock(t, pool, "job")
	require.True(t, still.ExpiresAt.Equal(*put.ExpiresAt))

	_, err := pool.Exec(ctx, "UPDATE distributed_locks SET expires_at = clock_timestamp() WHERE lock_name = 'job'") // the hold ends
	require.NoError(t, err)
	require.True(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms('job', 'h3', 1000)"), "taken once the hold ends")
	_, err = pool.Exec(ctx, "UPDATE distributed_locks SET acquired_at = clock_timestamp() - interval '2 s' WHERE lock_name = 'job'")
	require.NoError(t, err)
	require.Equal(t, answer{Released: true}, releaseAfter("h3", 1000), "held long enough: released at once")
	_, held := readLock(t, pool, "job")
	require.False(t, held)

	require.True(t, callBool(t, pool, "SELECT acquired FROM acquire_lock_ms('job', 'h3', 1000)"))
	before := readLocks(t, pool)
	for _, heldMs := range []any{int64(0), int64(-1), nil} {
		_, err := pool.Exec(ctx, "SELECT * FROM pglock_release_after('job', 'h3', $1)", heldMs)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "want a PostgreSQL error, got %v", err)
		require.Equal(t, []string{"22023", "p_held_ms"}, []string{pgErr.Code, pgErr.ColumnName}, pgErr.Message)
	}
	_, err = pool.Exec(ctx, "SELECT * FROM pglock_release_after('', 'h3', 1000)")
	require.ErrorContains(t, err, "22023")
	require.Equal(t, before, readLocks(t, pool), "nothing changed")
}

func callText(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&s), sql)
	return s
}
