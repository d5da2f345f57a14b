package leader_test

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
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func newElector(t *testing.T, pool *pgxpool.Pool, name string, cfg *leader.Config) *leader.Elector {
	t.Helper()
	if cfg == nil {
		cfg = &leader.Config{}
	}
	cfg.AppName = "leader-test"
	e, err := leader.New(pool, name, cfg)
	require.NoError(t, err)
	return e
}

// campaign runs e until the test ends (or stop is called), and returns stop, which waits for
// Run to return.
func campaign(t *testing.T, e *leader.Elector, cb leader.Callbacks) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := fmt.Errorf("Run ended its goroutine") // a callback called t.FailNow
		defer func() { done <- err }()
		err = e.Run(ctx, cb)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, testdb.Receive(t, done))
		})
	}
	t.Cleanup(stop)
	return stop
}

// fencedWrite appends term to the log in a transaction fenced by e: it fails unless e leads.
func fencedWrite(ctx context.Context, pool *pgxpool.Pool, e *leader.Elector, term int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := e.Fence(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO leader_log (term) VALUES ($1)`, term)
		return err
	})
}

func newLog(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE leader_log (id bigserial PRIMARY KEY, term bigint NOT NULL)`)
	require.NoError(t, err)
}

func TestOneLeaderAtATimeAndTermsOnlyGrow(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newLog(t, d.Pool)
	const terms = 6
	var mu sync.Mutex
	var elected []int64
	allDone := make(chan struct{})
	for i := range 3 {
		pool := d.NewPool(t, nil)
		e := newElector(t, pool, "reconciler", &leader.Config{TTL: 3 * time.Second})
		campaign(t, e, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
			mu.Lock()
			elected = append(elected, term)
			n := len(elected)
			mu.Unlock()
			if n > terms {
				<-ctx.Done() // lead until the test ends
				return
			}
			for range 5 {
				if err := fencedWrite(ctx, pool, e, term); err != nil {
					t.Errorf("candidate %d, term %d: %v", i, term, err)
				}
			}
			if n == terms {
				close(allDone)
			}
			// Returning resigns: the next candidate leads.
		}})
	}
	testdb.Receive(t, allDone)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(elected); i++ {
		require.Greater(t, elected[i], elected[i-1], "terms only grow: %v", elected)
	}
	var overlaps, writes int
	require.NoError(t, d.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM leader_log a JOIN leader_log b ON a.id < b.id AND a.term > b.term),
		(SELECT count(*) FROM leader_log)`).Scan(&overlaps, &writes))
	require.Zero(t, overlaps, "no write of an older term after a newer one's")
	require.GreaterOrEqual(t, writes, 5*(terms-1))
}

func TestPartitionedLeaderIsDemotedBeforeItsLeaseExpiresAndItsFenceFails(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newLog(t, d.Pool)
	pool, partition := d.PartitionablePool(t, nil)
	// A margin (a tenth of the TTL) of a second: the time a busy machine may take to run the
	// loss's timer, which must fire before the database could give the lease away.
	old := newElector(t, pool, "reconciler", &leader.Config{TTL: 10 * time.Second})
	type demotion struct {
		cause     error
		leaseLive bool
	}
	demoted := make(chan demotion, 1)
	var heal func()
	elected := make(chan int64, 1)
	campaign(t, old, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
		if heal != nil {
			<-ctx.Done() // elected again after the partition healed
			return
		}
		elected <- term
		heal = partition()
		live := testdb.LiveWhenDone(t, ctx, d.Pool, `SELECT expires_at FROM distributed_locks WHERE lock_name = 'pglock.leader/reconciler'`)
		demoted <- demotion{cause: context.Cause(ctx), leaseLive: live}
	}})
	oldTerm := testdb.Receive(t, elected)
	dm := testdb.Receive(t, demoted)
	require.ErrorIs(t, dm.cause, pglock.ErrLockLost)
	require.True(t, dm.leaseLive, "the leader is told before its lease could expire on the database")

	// The successor campaigns once the lease was read: it would have rewritten the row.
	successor := newElector(t, d.NewPool(t, nil), "reconciler", &leader.Config{TTL: 3 * time.Second})
	newTerm := make(chan int64, 1)
	campaign(t, successor, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
		newTerm <- term
		<-ctx.Done()
	}})
	require.Greater(t, testdb.Receive(t, newTerm), oldTerm)
	heal()
	err := fencedWrite(context.Background(), pool, old, oldTerm)
	require.Error(t, err, "a deposed leader's fenced write fails")
	require.True(t, errorsIsAny(err, pglock.ErrNotHeld, pglock.ErrLockLost), "%v", err)
	require.False(t, old.IsLeader())
}

// waitForCandidates returns once n candidates wait in election name.
func waitForCandidates(t testing.TB, pool *pgxpool.Pool, name string, n int) {
	t.Helper()
	testdb.WaitFor(t, func() bool {
		l, err := leader.Current(context.Background(), pool, name)
		return err == nil && l.Candidates >= n
	}, "%d candidates never waited in %q", n, name)
}

func errorsIsAny(err error, targets ...error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func TestOnDemotedOnlyEverFollowsOnElected(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var mu sync.Mutex
	events := map[int][]string{}
	record := func(i int, what string, term int64) {
		mu.Lock()
		events[i] = append(events[i], fmt.Sprintf("%s %d", what, term))
		mu.Unlock()
	}
	var stops []func()
	var electors []*leader.Elector
	firstElected := make(chan struct{}, 3)
	for i := range 3 {
		e := newElector(t, d.NewPool(t, nil), "x", nil)
		electors = append(electors, e)
		stops = append(stops, campaign(t, e, leader.Callbacks{
			OnElected: func(ctx context.Context, term int64) {
				record(i, "elected", term)
				firstElected <- struct{}{}
				<-ctx.Done()
			},
			OnDemoted: func(term int64) { record(i, "demoted", term) },
		}))
	}
	<-firstElected
	waitForCandidates(t, d.Pool, "x", 2)
	for i, e := range electors {
		if e.IsLeader() {
			require.NoError(t, e.Resign(context.Background())) // one handoff on the way
			<-firstElected
			_ = i
			break
		}
	}
	for _, stop := range stops {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, evs := range events {
		for j, ev := range evs {
			what, term, _ := strings.Cut(ev, " ")
			if j%2 == 0 {
				require.Equal(t, "elected", what, "elector %d: %v", i, evs)
			} else {
				require.Equal(t, "demoted "+term, ev, "elector %d: %v", i, evs)
				require.Equal(t, "elected "+term, evs[j-1])
			}
		}
		require.Zero(t, len(evs)%2, "elector %d ended demoted: %v", i, evs)
	}
}

func TestResignHandsLeadershipOnAndRunCampaignsAgain(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	terms := map[string]chan int64{"a": make(chan int64, 4), "b": make(chan int64, 4)}
	causes := make(chan error, 4)
	electors := map[string]*leader.Elector{}
	var newLeaders []leader.Leader
	var mu sync.Mutex
	for _, name := range []string{"a", "b"} {
		e := newElector(t, d.NewPool(t, nil), "x", nil)
		electors[name] = e
		cb := leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
			terms[name] <- term
			<-ctx.Done()
			causes <- context.Cause(ctx)
		}}
		if name == "b" {
			cb.OnNewLeader = func(l leader.Leader) {
				mu.Lock()
				newLeaders = append(newLeaders, l)
				mu.Unlock()
			}
		}
		campaign(t, e, cb)
		if name == "a" {
			first := testdb.Receive(t, terms["a"])
			require.True(t, e.IsLeader())
			require.Equal(t, first, e.Term())
			terms["a"] <- first // read again below
		}
	}
	first := testdb.Receive(t, terms["a"])
	waitForCandidates(t, d.Pool, "x", 1)
	// OnNewLeader tells of the leaders its watcher reads (a term that ends before the read is
	// not told): each term below lasts until b's watcher has read it, or on a busy machine the
	// watcher's first read could come after a's term, and b's next.
	seen := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(newLeaders) >= n
		}
	}
	testdb.WaitFor(t, seen(1), "b sees a elected")
	cur, err := leader.Current(ctx, d.Pool, "x")
	require.NoError(t, err)
	require.Equal(t, first, cur.Term)
	require.Contains(t, cur.Instance, "leader-test@")

	require.NoError(t, electors["a"].Resign(ctx))
	require.NotErrorIs(t, testdb.Receive(t, causes), pglock.ErrLockLost, "a resignation is no loss")
	second := testdb.Receive(t, terms["b"])
	require.Greater(t, second, first)
	require.False(t, electors["a"].IsLeader())
	require.Zero(t, electors["a"].Term())

	waitForCandidates(t, d.Pool, "x", 1)
	testdb.WaitFor(t, seen(2), "b sees itself elected")
	require.NoError(t, electors["b"].Resign(ctx))
	third := testdb.Receive(t, terms["a"])
	require.Greater(t, third, second, "a campaigned again after resigning")

	testdb.WaitFor(t, seen(3), "b sees every new leader")
	mu.Lock()
	require.Equal(t, []int64{first, second, third}, []int64{newLeaders[0].Term, newLeaders[1].Term, newLeaders[2].Term})
	mu.Unlock()
}

func TestCancelingRunHandsLeadershipOn(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	elected := make(chan int64, 2)
	onElected := func(ctx context.Context, term int64) { elected <- term; <-ctx.Done() }
	stopFirst := campaign(t, newElector(t, d.NewPool(t, nil), "x", nil), leader.Callbacks{OnElected: onElected})
	first := testdb.Receive(t, elected)
	campaign(t, newElector(t, d.NewPool(t, nil), "x", nil), leader.Callbacks{OnElected: onElected})
	waitForCandidates(t, d.Pool, "x", 1)
	stopFirst()
	require.Greater(t, testdb.Receive(t, elected), first)
}

func TestManyElectionsUseThePoolAndOneListenerConnection(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	const maxConns = 8
	pool := d.NewPool(t, func(c *pgxpool.Config) {
		c.MaxConns = maxConns
		c.ConnConfig.RuntimeParams["application_name"] = "many-elections"
	})
	const elections = 200
	var wg sync.WaitGroup
	wg.Add(elections)
	for i := range elections {
		var once sync.Once
		for range 3 {
			e := newElector(t, pool, fmt.Sprint("election-", i), &leader.Config{TTL: 10 * time.Second})
			campaign(t, e, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
				once.Do(wg.Done)
				<-ctx.Done()
			}})
		}
	}
	wg.Wait()
	var conns int
	require.NoError(t, d.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = 'many-elections'`).Scan(&conns))
	t.Logf("%d elections × 3 candidates: %d connections", elections, conns)
	require.LessOrEqual(t, conns, maxConns+1)
	leaders, err := leader.List(context.Background(), d.Pool)
	require.NoError(t, err)
	require.Len(t, leaders, elections)
	for _, l := range leaders {
		require.NotZero(t, l.Term)
	}
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name, election string
		want           error
	}{
		{"empty name", "", pglock.ErrInvalidName},
		{"name over the limit", strings.Repeat("n", leader.MaxNameLen+1), pglock.ErrInvalidName},
		{"name not UTF-8", "n\xff", pglock.ErrInvalidName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := leader.New(d.Pool, tc.election, nil)
			require.ErrorIs(t, err, tc.want)
			_, err = leader.Current(ctx, d.Pool, tc.election)
			require.ErrorIs(t, err, tc.want)
		})
	}
	_, err := leader.New(nil, "x", nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = leader.Current(ctx, nil, "x")
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = leader.List(ctx, nil)
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	_, err = leader.ForceResign(ctx, nil, "x")
	require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	for _, ttl := range []time.Duration{time.Millisecond, 25 * time.Hour} {
		_, err = leader.New(d.Pool, "x", &leader.Config{TTL: ttl})
		require.ErrorIs(t, err, pglock.ErrInvalidTTL)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	}
	e := newElector(t, d.Pool, "x", nil)
	require.ErrorIs(t, e.Run(ctx, leader.Callbacks{}), pglock.ErrInvalidArgument, "nil OnElected")
	_, err = leader.Current(ctx, d.Pool, "x")
	require.ErrorIs(t, err, pglock.ErrNoLeader)
	require.ErrorIs(t, e.Fence(ctx, nil), pglock.ErrInvalidArgument, "a nil transaction is refused before anything else")
	require.NoError(t, e.Resign(ctx), "resigning without leading does nothing")
	var rows int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM distributed_locks) + (SELECT count(*) FROM distributed_lock_waiters)`).Scan(&rows))
	require.Zero(t, rows)

	stop := campaign(t, e, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) { <-ctx.Done() }})
	testdb.WaitFor(t, e.IsLeader)
	require.ErrorIs(t, e.Run(ctx, leader.Callbacks{OnElected: func(context.Context, int64) {}}), pglock.ErrInvalidArgument, "a second Run at once")
	stop()
}

func TestForceResignDeposesTheLeaderWithinAHeartbeat(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	causes := make(chan error, 1)
	elected := make(chan int64, 2)
	campaign(t, newElector(t, d.NewPool(t, nil), "x", &leader.Config{TTL: 3 * time.Second}), leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
		elected <- term
		<-ctx.Done()
		select {
		case causes <- context.Cause(ctx):
		default:
		}
	}})
	first := testdb.Receive(t, elected)
	deposed, err := leader.ForceResign(ctx, d.Pool, "x")
	require.NoError(t, err)
	require.Equal(t, first, deposed.Term)
	require.ErrorIs(t, testdb.Receive(t, causes), pglock.ErrLockLost, "told at its next renewal")
	require.Greater(t, testdb.Receive(t, elected), first, "the next term is higher")
	_, err = leader.ForceResign(ctx, d.Pool, "nobody")
	require.ErrorIs(t, err, pglock.ErrNoLeader)
}

// A fenced transaction keeps its term: no successor is elected before it commits, and the
// database refuses the old term afterwards.
func TestFenceHoldsTheTermUntilCommitAndTheDatabaseRefusesItAfter(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newLog(t, d.Pool)
	ctx := context.Background()
	pool := d.NewPool(t, nil)
	old := newElector(t, pool, "x", &leader.Config{TTL: 3 * time.Second})
	elected := make(chan int64, 1)
	campaign(t, old, leader.Callbacks{OnElected: func(ctx context.Context, term int64) { elected <- term; <-ctx.Done() }})
	oldTerm := testdb.Receive(t, elected)

	// The successor waits before the old leader is deposed: the deposed one campaigns again at
	// once, and would be elected again were nobody waiting.
	successor := newElector(t, d.NewPool(t, nil), "x", nil)
	newTerm := make(chan int64, 1)
	campaign(t, successor, leader.Callbacks{OnElected: func(ctx context.Context, term int64) { newTerm <- term; <-ctx.Done() }})
	waitForCandidates(t, d.Pool, "x", 1)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Fence(ctx, tx))
	deposed := make(chan error, 1)
	go func() {
		_, err := leader.ForceResign(ctx, d.Pool, "x")
		deposed <- err
	}()
	select {
	case err := <-deposed:
		t.Fatalf("the leader was deposed while a fenced transaction was open: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_, err = tx.Exec(ctx, `INSERT INTO leader_log (term) VALUES ($1)`, oldTerm)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx), "the write inside the term lands")
	require.NoError(t, testdb.Receive(t, deposed))
	require.Greater(t, testdb.Receive(t, newTerm), oldTerm)
	err = pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		return tablelock.VerifyFence(ctx, tx, "pglock.leader/x", oldTerm) // the term, checked by the database
	})
	require.ErrorIs(t, err, pglock.ErrLockLost, "the old term is refused in the database")
}

func TestRunEndsOnAFailureRetryingCannotMend(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, &testdb.Options{Unmigrated: true})
	e := newElector(t, d.Pool, "x", nil)
	err := e.Run(context.Background(), leader.Callbacks{OnElected: func(context.Context, int64) {}})
	require.ErrorIs(t, err, pglock.ErrNotMigrated)
}

func TestOnElectedReturningAtOnceDoesNotSpin(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	var mu sync.Mutex
	terms := 0
	stop := campaign(t, newElector(t, d.Pool, "x", nil), leader.Callbacks{OnElected: func(context.Context, int64) {
		mu.Lock()
		terms++
		mu.Unlock()
	}})
	time.Sleep(time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, terms, 10, "terms that end at once are spaced out, not repeated in a loop")
}
