package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/testdb"
)

// setFixture is a Set on a fake clock whose statements go to a fake database: answered at once
// (held, unless the ref is in gone, or failing with fail), or, with hold, announced on batches
// and answered from answers.
type setFixture struct {
	clock   *clock.Fake
	set     *lease.Set
	ctx     context.Context
	batches chan []lease.Due
	answers chan error

	mu         sync.Mutex
	hold       bool
	gone       map[any]bool
	fail       error
	statements []int         // the size of each statement
	renewals   map[any][]int // per ref, the statement numbers that renewed it
	keepers    map[any]*lease.Keeper
	lost       map[any]error
	failures   map[any]int
}

func newSetFixture(t *testing.T) *setFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &setFixture{
		clock: clock.NewFake(t0), ctx: ctx, batches: make(chan []lease.Due, 1), answers: make(chan error),
		gone: map[any]bool{}, renewals: map[any][]int{}, keepers: map[any]*lease.Keeper{},
		lost: map[any]error{}, failures: map[any]int{},
	}
	f.set = lease.NewSet(lease.SetConfig{Renew: f.renew, Ctx: ctx, Clock: f.clock})
	t.Cleanup(func() {
		f.mu.Lock()
		keepers := f.keepers
		f.mu.Unlock()
		for _, k := range keepers {
			k.Stop()
		}
		cancel()
	})
	return f
}

func (f *setFixture) renew(ctx context.Context, due []lease.Due) ([]lease.Renewed, error) {
	f.mu.Lock()
	hold, fail := f.hold, f.fail
	f.mu.Unlock()
	if hold {
		f.batches <- due
		select {
		case err := <-f.answers:
			fail = err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statements = append(f.statements, len(due))
	if fail != nil {
		return nil, fail
	}
	out := make([]lease.Renewed, len(due))
	for i, d := range due {
		f.renewals[d.Ref] = append(f.renewals[d.Ref], len(f.statements))
		out[i] = lease.Renewed{ExpiresAt: f.clock.Now().Add(d.TTL), Held: !f.gone[d.Ref]}
	}
	return out, nil
}

// start keeps a lease written now, named ref.
func (f *setFixture) start(ref any, timing lease.Timing) *lease.Keeper {
	now := f.clock.Now()
	k := lease.New(lease.Config{
		Name: "x", Set: f.set, Ref: ref, Timing: timing, Start: now, ExpiresAt: now.Add(timing.TTL),
		Ctx: f.ctx, Clock: f.clock,
		OnLost: func(err error, _ pglock.Cause) {
			f.mu.Lock()
			f.lost[ref] = err
			f.mu.Unlock()
		},
		OnRenewFailed: func(_ error, failures int) {
			f.mu.Lock()
			f.failures[ref] = failures
			f.mu.Unlock()
		},
	})
	f.mu.Lock()
	f.keepers[ref] = k
	f.mu.Unlock()
	k.Start()
	return k
}

// next advances the clock to the next timer and waits until the timers are set again: n of
// them (each lease's loss, and the Set's next tick).
func (f *setFixture) next(t *testing.T, n int) {
	t.Helper()
	_, d := f.clock.Pending()
	f.clock.Advance(d)
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), n))
}

var beat = lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond}

func TestSetRenewsLeasesTakenAtDifferentTimesInAFewStatementsPerHeartbeat(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	const n = 400
	for i := range n { // spread over one heartbeat, as a process takes them one by one
		f.start(i, beat)
		f.clock.Advance(beat.Heartbeat / n)
		require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), i+2))
	}
	for f.clock.Now().Before(t0.Add(6 * time.Second)) {
		f.next(t, n+1)
	}

	f.mu.Lock()
	lost, statements, renewals := len(f.lost), len(f.statements), f.renewals
	f.mu.Unlock()
	require.Zero(t, lost)
	// From the third heartbeat on, the leases go together: at most a statement per tenth of a
	// heartbeat (a tick takes every lease due within a tenth of one), whatever their number.
	perBeat := statements / 6
	require.LessOrEqual(t, perBeat, 11, "statements per heartbeat, for %d leases", n)
	for ref, renewed := range renewals {
		// Six seconds of one-second heartbeats: five or six renewals, never more than a tenth early.
		require.GreaterOrEqual(t, len(renewed), 5, "lease %v", ref)
		require.LessOrEqual(t, len(renewed), 7, "lease %v", ref)
	}
	require.Equal(t, n, f.set.Len())
	require.Equal(t, statements, f.set.Statements())
}

func TestSetRenewsLeasesTakenTogetherInOneStatementPerHeartbeat(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	const n = lease.MaxBatch + 1 // two statements per tick
	for i := range n {
		f.start(i, beat)
	}
	for range 3 {
		f.next(t, n+1)
	}
	f.mu.Lock()
	statements, lost := sortedPairs(f.statements), len(f.lost)
	f.mu.Unlock()
	require.Equal(t, []int{lease.MaxBatch, 1, lease.MaxBatch, 1, lease.MaxBatch, 1}, statements)
	require.Zero(t, lost)
}

// sortedPairs orders each tick's two statements (sent concurrently) larger first.
func sortedPairs(sizes []int) []int {
	out := append([]int(nil), sizes...)
	for i := 0; i+1 < len(out); i += 2 {
		if out[i] < out[i+1] {
			out[i], out[i+1] = out[i+1], out[i]
		}
	}
	return out
}

func TestSetLosesALeaseFoundGoneAtOnceAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	kept, gone := f.start("kept", beat), f.start("gone", beat)
	f.mu.Lock()
	f.gone["gone"] = true
	f.mu.Unlock()
	_, d := f.clock.Pending()
	f.clock.Advance(d)
	<-gone.Lost()
	require.ErrorIs(t, gone.Err(), pglock.ErrLockLost)
	require.Equal(t, pglock.CauseForceReleased, pglock.CauseOf(gone.Err()))
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 2)) // kept's loss and the next tick
	requireHeld(t, kept)
	require.Equal(t, t0.Add(time.Second+2700*time.Millisecond), kept.Deadline())
	require.Equal(t, 1, f.set.Len(), "a lost lease leaves the set")
}

func TestSetRetriesAFailedStatementAndLosesEachLeaseAtItsOwnDeadline(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	f.mu.Lock()
	f.fail = errors.New("connection refused")
	f.mu.Unlock()
	long, err := lease.NewTiming(6*time.Second, time.Second, 0)
	require.NoError(t, err)
	short, longer := f.start("short", beat), f.start("long", long)

	// Retries come at most halfway to the deadline: stop while there is room for one more.
	for short.Deadline().Sub(f.clock.Now()) > 20*time.Millisecond {
		f.next(t, 3) // both losses, and the retry
	}
	requireHeld(t, short)
	f.clock.Advance(short.Deadline().Sub(f.clock.Now()))
	<-short.Lost()
	require.Equal(t, pglock.CauseRenewalFailed, pglock.CauseOf(short.Err()))
	require.Equal(t, t0.Add(2700*time.Millisecond), f.clock.Now(), "lost at its deadline, not before")
	requireHeld(t, longer)
	f.mu.Lock()
	failures := f.failures["short"]
	f.fail = nil // the database is back: the longer lease is saved
	f.mu.Unlock()
	require.Greater(t, failures, 3, "retried until its deadline")
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 2)) // the longer's loss, and its retry
	f.next(t, 2)
	requireHeld(t, longer)
	require.Equal(t, f.clock.Now().Add(5400*time.Millisecond), longer.Deadline())
}

func TestSetReportsHowFarRenewalsAreBehindAndWhenItIsSaturated(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	type lagReport struct {
		lag       time.Duration
		saturated bool
	}
	reports := make(chan lagReport, 4)
	f.set = lease.NewSet(lease.SetConfig{Renew: f.renew, Ctx: f.ctx, Clock: f.clock,
		OnLag: func(lag time.Duration, saturated bool) { reports <- lagReport{lag, saturated} }})
	f.mu.Lock()
	f.hold = true
	f.mu.Unlock()
	first := f.start("first", beat)
	f.clock.Advance(500 * time.Millisecond)
	second := f.start("second", beat)
	f.clock.Advance(500 * time.Millisecond)
	require.Len(t, testdb.Receive(t, f.batches), 1, "at 1 s only the first is due")
	require.Zero(t, f.set.Lag())
	f.clock.Advance(time.Second) // the statement is held up on the server for a second
	require.Equal(t, time.Second, f.set.Lag(), "the first has waited a second so far")
	require.True(t, f.set.Saturated(), "more than half a heartbeat behind")

	f.answers <- nil
	require.Equal(t, []lease.Due{{"second", beat.TTL}}, testdb.Receive(t, f.batches), "due at 1.5 s, sent at 2 s")
	require.Equal(t, lagReport{time.Second, true}, testdb.Receive(t, reports), "told at the end of the tick")
	f.answers <- nil
	require.Equal(t, lagReport{500 * time.Millisecond, true}, testdb.Receive(t, reports),
		"the second is not late (half a heartbeat is the limit), the first is until its next renewal")
	require.True(t, f.set.Saturated())

	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 3)) // both losses, and the next tick
	_, next := f.clock.Pending()
	f.clock.Advance(next) // the first's next heartbeat, renewed at once
	require.Equal(t, []lease.Due{{"first", beat.TTL}}, testdb.Receive(t, f.batches))
	f.answers <- nil
	require.Equal(t, lagReport{0, false}, testdb.Receive(t, reports), "caught up")
	require.False(t, f.set.Saturated())
	requireHeld(t, first)
	requireHeld(t, second)
}

func TestAnExplicitRenewalUnderWayKeepsNoTickSpinning(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	f.mu.Lock()
	f.hold = true
	f.mu.Unlock()
	k := f.start("x", beat)
	f.clock.Advance(900 * time.Millisecond)
	renewed := make(chan error, 1)
	go func() { renewed <- k.Renew(context.Background(), nil) }()
	testdb.Receive(t, f.batches)            // the explicit renewal, held up on the server
	f.clock.Advance(200 * time.Millisecond) // its heartbeat comes due meanwhile: the tick passes over it
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 1))
	n, _ := f.clock.Pending()
	require.Equal(t, 1, n, "only the loss: no tick is due while the renewal is under way")
	f.answers <- nil
	require.NoError(t, testdb.Receive(t, renewed))
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 2))
	_, next := f.clock.Pending()
	require.Equal(t, time.Second, next, "the next heartbeat, from the explicit renewal")
}

func TestExplicitRenewalInASetGoesAlone(t *testing.T) {
	t.Parallel()
	f := newSetFixture(t)
	k := f.start("x", beat)
	f.start("y", beat)
	f.clock.Advance(500 * time.Millisecond)
	require.NoError(t, k.Renew(context.Background(), nil))
	f.mu.Lock()
	statements := f.statements
	f.mu.Unlock()
	require.Equal(t, []int{1}, statements)
	require.Equal(t, t0.Add(500*time.Millisecond+2700*time.Millisecond), k.Deadline())
}
