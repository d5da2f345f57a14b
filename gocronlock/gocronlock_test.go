package gocronlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/gocronlock"
	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
	"github.com/pglock/pglock/tablelock"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func newTableLocker(t *testing.T, pool *pgxpool.Pool, cfg *tablelock.Config) *tablelock.Locker {
	t.Helper()
	if cfg == nil {
		cfg = &tablelock.Config{}
	}
	cfg.AppName = "gocronlock-test"
	l, err := tablelock.New(pool, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close(context.Background())) })
	return l
}

// newRuns makes the table each run of a job records itself in, on the database's clock.
func newRuns(t *testing.T, d *testdb.DB) {
	t.Helper()
	_, err := d.Pool.Exec(context.Background(), `CREATE TABLE runs (id bigserial PRIMARY KEY, instance text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp(), unlocked timestamptz)`)
	require.NoError(t, err)
}

// record is a job's task: it records a run of instance, then works for work. A run under the
// job's lock is recorded at the lock's acquisition, which decided the interval it runs for: on a
// busy machine the task can start a while after it.
func record(d *testdb.DB, instance string, work time.Duration) gocron.Task {
	return gocron.NewTask(func() {
		_, err := d.Pool.Exec(context.Background(), `INSERT INTO runs (instance, at)
			SELECT $1, coalesce((SELECT acquired_at FROM distributed_locks WHERE lock_name = $2), clock_timestamp())`,
			instance, gocronlock.DefaultPrefix+"report")
		if err != nil {
			panic(err) // gocron recovers it; the run is missing from the count, which fails the test
		}
		time.Sleep(work)
	})
}

// unlockRecorder is a gocron.Locker that records, in the last run of instance, when its Unlock
// returned: the lock was given back by then (or held on to the minimum hold).
type unlockRecorder struct {
	gocron.Locker
	d        *testdb.DB
	instance string
	failed   *atomic.Int64 // records that failed
}

func (u unlockRecorder) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := u.Locker.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return recordedUnlock{lk, u}, nil
}

type recordedUnlock struct {
	gocron.Lock
	u unlockRecorder
}

func (r recordedUnlock) Unlock(ctx context.Context) error {
	err := r.Lock.Unlock(ctx)
	if _, recordErr := r.u.d.Pool.Exec(context.Background(), `UPDATE runs SET unlocked = clock_timestamp()
		WHERE id = (SELECT max(id) FROM runs WHERE instance = $1)`, r.u.instance); recordErr != nil {
		r.u.failed.Add(1)
	}
	return err
}

// startScheduler starts a gocron scheduler with opts and the job "report" every interval from
// start, stopped when the test ends.
func startScheduler(t *testing.T, start time.Time, interval time.Duration, task gocron.Task, opts ...gocron.SchedulerOption) {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	require.NoError(t, err)
	_, err = s.NewJob(gocron.DurationJob(interval), task, gocron.WithName("report"),
		gocron.WithStartAt(gocron.WithStartDateTime(start)))
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { assert.NoError(t, s.Shutdown()) })
}

// releasedAtOnce is the gocron.Locker of the adapters that fall short: the lock goes as soon as
// the run returns.
type releasedAtOnce struct{ l *tablelock.Locker }

func (r releasedAtOnce) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := r.l.TryAcquire(ctx, key, nil)
	if err != nil {
		return nil, err
	}
	return unlockAtOnce{lk}, nil
}

type unlockAtOnce struct{ lk *tablelock.Lock }

func (u unlockAtOnce) Unlock(ctx context.Context) error {
	return u.lk.Release(context.WithoutCancel(ctx))
}

// Three instances run a job every second, from start offsets of 0, 300 and 700 ms, the second
// one's job taking 1.2 s (past its interval and its hold) where the others' take 10 ms. With
// gocronlock's Locker no interval of 15 s runs twice, counted in the database, and one is
// skipped only as Every says it may be: when the run of the interval before held the lock past
// this one's last tick (acquired late on a busy machine, or working past its hold). With a lock
// released as the run returns (the failure mode of gocron's existing adapters), intervals run
// twice.
func TestNoIntervalRunsTwiceAcrossInstancesWithSkewedStarts(t *testing.T) {
	t.Parallel()
	const window = 15
	instances := []struct {
		offset, work time.Duration
	}{{0, 10 * time.Millisecond}, {300 * time.Millisecond, 1200 * time.Millisecond}, {700 * time.Millisecond, 10 * time.Millisecond}}
	lastTick := instances[len(instances)-1].offset
	for _, tt := range []struct {
		name   string
		locker func(t *testing.T, l *tablelock.Locker) gocron.Locker
		once   bool
	}{
		{"minimum hold", func(t *testing.T, l *tablelock.Locker) gocron.Locker {
			base, err := gocronlock.NewLocker(l, time.Minute, nil)
			require.NoError(t, err)
			every, err := base.Every(time.Second)
			require.NoError(t, err)
			return every
		}, true},
		{"released at once", func(_ *testing.T, l *tablelock.Locker) gocron.Locker { return releasedAtOnce{l} }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t, nil)
			newRuns(t, d)
			start := time.Now().Add(time.Second).Truncate(time.Second)
			var (
				hold          time.Duration
				recordsFailed atomic.Int64
			)
			for i, in := range instances {
				locker := tt.locker(t, newTableLocker(t, d.NewPool(t, nil), nil))
				if every, ok := locker.(*gocronlock.Locker); ok {
					hold = every.MinHold()
				}
				startScheduler(t, start.Add(in.offset), time.Second, record(d, fmt.Sprint(i), in.work),
					gocron.WithDistributedLocker(unlockRecorder{locker, d, fmt.Sprint(i), &recordsFailed}))
			}
			time.Sleep(time.Until(start.Add(window * time.Second)))

			require.Zero(t, recordsFailed.Load(), "unlocks not recorded")
			type run struct {
				instance     int
				at, unlocked time.Time // the acquisition of its lock, and its Unlock's return (or now)
			}
			rows, err := d.Pool.Query(context.Background(), `SELECT instance::int, at, coalesce(unlocked, clock_timestamp()) FROM runs
				WHERE at < $1::timestamptz + make_interval(secs => $2) ORDER BY at`, start, window)
			require.NoError(t, err)
			runs := map[int][]run{} // by interval
			for rows.Next() {
				var r run
				require.NoError(t, rows.Scan(&r.instance, &r.at, &r.unlocked))
				k := int(r.at.Sub(start) / time.Second)
				runs[k] = append(runs[k], r)
			}
			require.NoError(t, rows.Err())
			twice := 0
			for k := range window {
				if len(runs[k]) > 1 {
					twice++
				}
			}
			if !tt.once {
				require.Positive(t, twice, "a lock released as the run returns lets another instance run the interval again: %v", runs)
				t.Logf("released at once: %d of %d intervals ran more than once", twice, window)
				return
			}
			require.Zero(t, twice, "intervals run twice: %v", runs)
			// A hold past the last instance's tick, and short of the next interval: else Every
			// would skip intervals however timely the acquisitions.
			require.Greater(t, hold, lastTick)
			require.Less(t, hold, time.Second)
			skipped := 0
			for k := range window {
				if len(runs[k]) == 1 {
					continue
				}
				skipped++
				require.Positive(t, k, "the first interval, with the lock free, was skipped: %v", runs)
				require.Len(t, runs[k-1], 1, "intervals %d and %d both skipped: %v", k-1, k, runs)
				before := runs[k-1][0]
				heldUntil := later(before.at.Add(hold), before.unlocked) // given back by then
				require.True(t, heldUntil.After(start.Add(time.Duration(k)*time.Second+lastTick)),
					"interval %d skipped, though interval %d's run (instance %d, acquired at +%s, unlocked at +%s) held the lock until +%s only, before this interval's last tick",
					k, k-1, before.instance, before.at.Sub(start), before.unlocked.Sub(start), heldUntil.Sub(start))
			}
			t.Logf("minimum hold: %d of %d intervals ran once, %d skipped as Every allows, none twice", window-skipped, window, skipped)
		})
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// A run whose lock is lost while its job runs is told to OnLost, with the job and the cause,
// and to the Observer (which otelpglock turns into its lost-locks metric).
func TestALockLostWhileItsJobRunsIsSignalled(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	ctx := context.Background()
	events := make(chan pglock.Event, 64)
	l := newTableLocker(t, d.NewPool(t, nil), &tablelock.Config{Observer: pglock.ObserverFunc(func(_ context.Context, e pglock.Event) {
		if e.Kind == pglock.EventLost {
			events <- e
		}
	})})
	type loss struct {
		job   string
		cause pglock.Cause
		err   error
	}
	lost := make(chan loss, 1)
	// A lease of seconds: lost only by the operator's release, not by a busy machine's renewals.
	locker, err := gocronlock.NewLocker(l, time.Second, &gocronlock.Options{TTL: 5 * time.Second,
		OnLost: func(job string, cause pglock.Cause, err error) { lost <- loss{job, cause, err} }})
	require.NoError(t, err)

	run, err := locker.Lock(ctx, "report")
	require.NoError(t, err)
	_, err = locker.Lock(ctx, "report")
	require.ErrorIs(t, err, pglock.ErrLocked, "one run at a time")
	_, err = d.Pool.Exec(ctx, "DELETE FROM distributed_locks WHERE lock_name = 'gocron/report'") // an operator's release
	require.NoError(t, err)
	got := testdb.Receive(t, lost)
	require.Equal(t, "report", got.job)
	require.Equal(t, pglock.CauseForceReleased, got.cause)
	require.ErrorIs(t, got.err, pglock.ErrLockLost)
	e := testdb.Receive(t, events)
	require.Equal(t, "gocron/report", e.Name)
	require.Equal(t, pglock.CauseForceReleased, e.Cause)
	require.ErrorIs(t, run.Unlock(ctx), pglock.ErrLockLost)
}

// gocron unlocks with the job's context, which its shutdown has canceled: the hold is set all
// the same, on the database's clock from the acquisition, and outlives the process.
func TestUnlockKeepsTheLockForTheMinimumHoldWhateverItsContext(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	pool := d.NewPool(t, nil)
	l, err := tablelock.New(pool, &tablelock.Config{AppName: "gocronlock-test"})
	require.NoError(t, err)
	locker, err := gocronlock.NewLocker(l, 90*time.Second, &gocronlock.Options{TTL: 2 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	run, err := locker.Lock(ctx, "report")
	require.NoError(t, err)
	cancel()
	require.NoError(t, run.Unlock(ctx))
	require.ErrorIs(t, run.Unlock(ctx), pglock.ErrNotHeld)
	require.NoError(t, l.Close(context.Background()))

	var held time.Duration
	require.NoError(t, d.Pool.QueryRow(context.Background(),
		"SELECT expires_at - acquired_at FROM distributed_locks WHERE lock_name = 'gocron/report'").Scan(&held))
	require.Equal(t, 90*time.Second, held)
	_, err = newTableLocker(t, d.NewPool(t, nil), nil).TryAcquire(context.Background(), "gocron/report", nil)
	require.ErrorIs(t, err, pglock.ErrLocked)
}

// Bad input is refused by NewLocker, not by the first Lock (gocron drops Lock's errors
// unlogged: the job would silently never run), with an error matching pglock.ErrInvalidArgument
// (and ErrInvalidTTL for a lease, ErrInvalidName for a prefix), and writes nothing.
func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	l := newTableLocker(t, d.Pool, nil)
	for _, tt := range []struct {
		name    string
		locker  *tablelock.Locker
		minHold time.Duration
		opts    *gocronlock.Options
		want    []error
	}{
		{"nil locker", nil, time.Second, nil, []error{pglock.ErrInvalidArgument}},
		{"zero hold", l, 0, nil, []error{pglock.ErrInvalidArgument}},
		{"negative hold", l, -time.Second, nil, []error{pglock.ErrInvalidArgument}},
		{"negative TTL", l, time.Second, &gocronlock.Options{TTL: -time.Second}, []error{pglock.ErrInvalidTTL, pglock.ErrInvalidArgument}},
		{"TTL under the least", l, time.Second, &gocronlock.Options{TTL: 50 * time.Millisecond}, []error{pglock.ErrInvalidTTL, pglock.ErrInvalidArgument}},
		{"TTL over the most", l, time.Second, &gocronlock.Options{TTL: 25 * time.Hour}, []error{pglock.ErrInvalidTTL, pglock.ErrInvalidArgument}},
		{"prefix with NUL", l, time.Second, &gocronlock.Options{Prefix: "jobs\x00/"}, []error{pglock.ErrInvalidName}},
		{"prefix with no room for a job", l, time.Second, &gocronlock.Options{Prefix: strings.Repeat("p", pglock.MaxNameLen)}, []error{pglock.ErrInvalidName}},
		{"a semaphore's prefix", l, time.Second, &gocronlock.Options{Prefix: tablelock.SemaphorePrefix + "jobs/"}, []error{pglock.ErrInvalidName}},
	} {
		_, err := gocronlock.NewLocker(tt.locker, tt.minHold, tt.opts)
		for _, want := range tt.want {
			require.ErrorIs(t, err, want, tt.name)
		}
		require.Equal(t, 1, strings.Count(err.Error(), "pglock: "), "%s: the text says pglock once: %v", tt.name, err)
	}
	locker, err := gocronlock.NewLocker(l, time.Second, nil)
	require.NoError(t, err)
	for _, interval := range []time.Duration{0, -time.Minute} {
		_, err := locker.Every(interval)
		require.ErrorIs(t, err, pglock.ErrInvalidArgument)
	}
	every, err := locker.Every(time.Minute)
	require.NoError(t, err)
	require.Equal(t, 59*time.Second, every.MinHold())
	_, err = locker.Lock(context.Background(), string(make([]byte, pglock.MaxNameLen)))
	require.ErrorIs(t, err, pglock.ErrInvalidName)
	var n int
	require.NoError(t, d.Pool.QueryRow(context.Background(), "SELECT count(*) FROM distributed_locks").Scan(&n))
	require.Zero(t, n)
}

// With the Elector, only the leader's instance runs the job; once the leader is cut off from the
// database, another instance takes over once its lease ends, and the old leader runs nothing after.
func TestOnlyTheLeaderRunsAndAnotherTakesOverWhenItIsCutOff(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newRuns(t, d)
	ctx := context.Background()
	// The old leader stops at its lease's end less the margin (a tenth): a second before anyone
	// else may lead, room for a busy machine's late timer.
	const ttl = 10 * time.Second
	partitions := make([]func() (heal func()), 3)
	start := time.Now().Add(500 * time.Millisecond)
	for i := range partitions {
		pool, partition := d.PartitionablePool(t, nil)
		partitions[i] = partition
		e, err := gocronlock.NewElector(ctx, pool, "reports", &leader.Config{AppName: "gocronlock-test", TTL: ttl})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, e.Close()) })
		startScheduler(t, start, 200*time.Millisecond, record(d, fmt.Sprint(i), 0), gocron.WithDistributedElector(e))
	}
	instances := func() map[string]int {
		rows, err := d.Pool.Query(ctx, "SELECT instance, count(*) FROM runs GROUP BY instance")
		require.NoError(t, err)
		counts := map[string]int{}
		for rows.Next() {
			var instance string
			var n int
			require.NoError(t, rows.Scan(&instance, &n))
			counts[instance] = n
		}
		require.NoError(t, rows.Err())
		return counts
	}
	testdb.WaitFor(t, func() bool { return sum(instances()) >= 5 })
	before := instances()
	require.Len(t, before, 1, "only the leader runs: %v", before)
	var first string
	for instance := range before {
		first = instance
	}
	var index int
	fmt.Sscan(first, &index)
	var cut time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&cut))
	heal := partitions[index]()
	defer heal()
	testdb.WaitFor(t, func() bool { return len(instances()) == 2 })

	var lastOld, firstNew time.Time
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT max(at) FROM runs WHERE instance = $1", first).Scan(&lastOld))
	require.NoError(t, d.Pool.QueryRow(ctx, "SELECT min(at) FROM runs WHERE instance <> $1", first).Scan(&firstNew))
	require.True(t, lastOld.Before(firstNew), "the old leader ran nothing once another was elected")
	// Within the TTL, a poll and a tick on an idle machine; the bound only catches a handover
	// that waited for more than that (another lease), with room for a busy machine.
	require.Less(t, firstNew.Sub(cut), 2*ttl, "handed over after the lease, not a lease later")
	t.Logf("cut off at %s; the old leader's last run %s after, the new leader's first %s after",
		cut.Format(time.TimeOnly), lastOld.Sub(cut), firstNew.Sub(cut))
}

func sum(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
