package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/clock"
	"github.com/pglock/pglock/internal/lease"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// fixture is a keeper on a fake clock whose renewals go to a fake database: each renewal is
// announced on calls and answered from answers.
type fixture struct {
	clock   *clock.Fake
	keeper  *lease.Keeper
	calls   chan time.Duration // the TTL each renewal asked for
	answers chan answer
	lost    chan error // OnLost's calls
	failed  chan int   // OnRenewFailed's failure counts
	work    *lease.Group
}

type answer struct {
	held bool
	err  error
}

func newFixture(t *testing.T, timing lease.Timing) *fixture {
	t.Helper()
	f := &fixture{
		clock: clock.NewFake(t0), calls: make(chan time.Duration, 1), answers: make(chan answer),
		lost: make(chan error, 2), failed: make(chan int, 10), work: &lease.Group{},
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.keeper = lease.New(lease.Config{
		Name: "x", Timing: timing, Start: t0, ExpiresAt: t0.Add(timing.TTL), Ctx: ctx, Clock: f.clock, Tracker: f.work,
		Renew: func(ctx context.Context, ttl time.Duration) (time.Time, bool, error) {
			f.calls <- ttl
			select {
			case a := <-f.answers:
				return t0.Add(time.Hour), a.held, a.err
			case <-ctx.Done():
				return time.Time{}, false, ctx.Err()
			}
		},
		OnLost:        func(err error, _ pglock.Cause) { f.lost <- err },
		OnRenewFailed: func(_ error, failures int) { f.failed <- failures },
	})
	t.Cleanup(func() {
		f.keeper.Stop()
		cancel()
	})
	f.keeper.Start()
	return f
}

func requireHeld(t *testing.T, k *lease.Keeper) {
	t.Helper()
	select {
	case <-k.Lost():
		t.Fatalf("lost too early: %v", k.Err())
	default:
	}
	require.NoError(t, k.Err())
}

var noHeartbeat = lease.Timing{TTL: 3 * time.Second, Margin: 300 * time.Millisecond}

func TestLeaseIsLostExactlyAtItsDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noHeartbeat)
	f.clock.Advance(2699 * time.Millisecond)
	n, next := f.clock.Pending()
	require.Equal(t, []any{1, time.Millisecond}, []any{n, next}, "the loss, due at the deadline")
	requireHeld(t, f.keeper)
	f.clock.Advance(time.Millisecond)
	err := testdb.Receive(t, f.lost)
	require.ErrorIs(t, err, pglock.ErrLockLost)
	<-f.keeper.Lost()
	require.Equal(t, err, f.keeper.Err())
	require.Equal(t, pglock.CauseExpired, pglock.CauseOf(err), "no heartbeat tried to renew it")
	require.Equal(t, t0.Add(2700*time.Millisecond), f.keeper.Deadline())
}

func TestRenewalMovesTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noHeartbeat)
	f.clock.Advance(time.Second)
	renewed := make(chan error)
	go func() { renewed <- f.keeper.Renew(context.Background(), nil) }()
	require.Equal(t, 3*time.Second, testdb.Receive(t, f.calls))
	f.clock.Advance(500 * time.Millisecond) // the new lease counts from the request's start
	f.answers <- answer{held: true}
	require.NoError(t, testdb.Receive(t, renewed))
	require.Equal(t, t0.Add(3700*time.Millisecond), f.keeper.Deadline())
	require.Equal(t, t0.Add(time.Hour), f.keeper.ExpiresAt())

	f.clock.Advance(2199 * time.Millisecond) // 3.699 s: past the first deadline, not the second
	n, next := f.clock.Pending()
	require.Equal(t, []any{1, time.Millisecond}, []any{n, next}, "the loss, moved to the new deadline")
	requireHeld(t, f.keeper)
	f.clock.Advance(time.Millisecond)
	require.ErrorIs(t, testdb.Receive(t, f.lost), pglock.ErrLockLost)
}

func TestShorterRenewalMovesTheDeadlineInBeforeItIsSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noHeartbeat)
	shorter := lease.Timing{TTL: time.Second, Margin: 100 * time.Millisecond}
	renewed := make(chan error)
	go func() { renewed <- f.keeper.Renew(context.Background(), &shorter) }()
	require.Equal(t, time.Second, testdb.Receive(t, f.calls))
	// The request may commit unseen: until its answer, the shorter lease is the one to trust.
	require.Equal(t, t0.Add(900*time.Millisecond), f.keeper.Deadline())
	f.clock.Advance(900 * time.Millisecond)
	require.ErrorIs(t, testdb.Receive(t, f.lost), pglock.ErrLockLost)
	f.answers <- answer{held: true}
	require.ErrorIs(t, testdb.Receive(t, renewed), pglock.ErrLockLost, "a renewal that returns after the deadline does not revive the lease")
}

func TestHeartbeatRenewsEveryIntervalAndRetriesFailures(t *testing.T) {
	t.Parallel()
	f := newFixture(t, lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond})
	f.clock.Advance(time.Second)
	testdb.Receive(t, f.calls)
	f.answers <- answer{held: true}
	require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 2)) // the next heartbeat is set once the renewal's answer is in
	require.Equal(t, t0.Add(3700*time.Millisecond), f.keeper.Deadline())

	f.clock.Advance(time.Second)
	testdb.Receive(t, f.calls)
	f.answers <- answer{err: errors.New("connection reset")}
	require.Equal(t, 1, testdb.Receive(t, f.failed))
	_, next := f.clock.Pending()
	require.LessOrEqual(t, next, 10*time.Millisecond, "the first retry comes after at most 10 ms")
	requireHeld(t, f.keeper)
}

func TestFailingRenewalsLoseTheLeaseAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond})
	deadline := f.keeper.Deadline()
	failures := 0
	// Retries come at most halfway to the deadline: stop while there is room for one more.
	for deadline.Sub(f.clock.Now()) > 20*time.Millisecond {
		require.NoError(t, f.clock.WaitForTimers(testdb.Context(t), 2)) // the loss and the next (re)try
		_, next := f.clock.Pending()
		f.clock.Advance(next)
		testdb.Receive(t, f.calls)
		f.answers <- answer{err: errors.New("connection refused")}
		failures++
		require.Equal(t, failures, testdb.Receive(t, f.failed))
	}
	require.Greater(t, failures, 3, "retries go on until the deadline")
	requireHeld(t, f.keeper)
	f.clock.Advance(deadline.Sub(f.clock.Now()))
	lost := testdb.Receive(t, f.lost)
	require.ErrorIs(t, lost, pglock.ErrLockLost)
	require.Equal(t, pglock.CauseRenewalFailed, pglock.CauseOf(lost))
}

// A heartbeat the server held up until the deadline fails then: that is the loss, told once,
// not a failure to retry (a retry past the deadline fails at once, again and again, until the
// loss timer runs, which a busy machine can delay).
func TestHeartbeatFailingAtTheDeadlineTellsOnlyTheLoss(t *testing.T) {
	t.Parallel()
	for range 20 { // the loss timer and the heartbeat race to tell it
		f := newFixture(t, lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond})
		f.clock.Advance(time.Second)
		testdb.Receive(t, f.calls) // the heartbeat's renewal, held up on the server
		f.clock.Advance(f.keeper.Deadline().Sub(f.clock.Now()))
		select {
		case f.answers <- answer{err: context.DeadlineExceeded}:
		case <-f.keeper.Lost(): // the loss timer came first, and ended the heartbeat's request
		}
		lost := testdb.Receive(t, f.lost)
		require.Equal(t, pglock.CauseRenewalFailed, pglock.CauseOf(lost))
		f.work.Wait() // the heartbeat, and the loss timer, have ended
		require.Len(t, f.failed, 0, "no failed renewal is told")
		require.Len(t, f.lost, 0, "the loss is told once")
	}
}

func TestRenewalThatFindsTheRowGoneLosesTheLeaseAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noHeartbeat)
	renewed := make(chan error)
	go func() { renewed <- f.keeper.Renew(context.Background(), nil) }()
	testdb.Receive(t, f.calls)
	f.answers <- answer{held: false}
	err := testdb.Receive(t, renewed)
	require.ErrorIs(t, err, pglock.ErrLockLost)
	require.Equal(t, err, testdb.Receive(t, f.lost))
	require.Equal(t, pglock.CauseForceReleased, pglock.CauseOf(err))
	require.ErrorIs(t, f.keeper.Renew(context.Background(), nil), pglock.ErrLockLost, "a lost lease is not renewed")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, f.keeper.Renew(canceled, nil), pglock.ErrLockLost, "the loss, not the context, is the answer")
	f.clock.Advance(time.Hour)
	require.Empty(t, f.lost, "a loss is told once")
}

func TestExplicitRenewalWaitsForTheHeartbeatUnderWay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond})
	f.clock.Advance(time.Second)
	testdb.Receive(t, f.calls) // the heartbeat's renewal, held up on the server

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, f.keeper.Renew(ctx, nil), context.Canceled, "its ctx bounds the wait for its turn")

	renewed := make(chan error)
	go func() { renewed <- f.keeper.Renew(context.Background(), nil) }()
	select {
	case ttl := <-f.calls:
		t.Fatalf("a second renewal (TTL %s) was sent while the first was under way", ttl)
	case <-time.After(50 * time.Millisecond): // a failure here is certain; a pass is likely
	}
	f.answers <- answer{held: true}
	testdb.Receive(t, f.calls) // sent once the first has its answer
	f.answers <- answer{held: true}
	require.NoError(t, testdb.Receive(t, renewed))
}

func TestGuardedContextIsCanceledWithTheLoss(t *testing.T) {
	t.Parallel()
	f := newFixture(t, noHeartbeat)
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ctx, stop := f.keeper.Guard(parent)
	defer stop()
	require.NoError(t, ctx.Err())
	f.clock.Advance(3 * time.Second)
	<-ctx.Done()
	require.ErrorIs(t, context.Cause(ctx), pglock.ErrLockLost)
	require.Equal(t, f.keeper.Err(), context.Cause(ctx))

	unlost, stopUnlost := newFixture(t, noHeartbeat).keeper.Guard(parent)
	stopUnlost()
	require.ErrorIs(t, context.Cause(unlost), context.Canceled, "stopped before any loss: a plain cancel")
}

func TestStoppedLeaseIsNeverDeclaredLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, lease.Timing{TTL: 3 * time.Second, Heartbeat: time.Second, Margin: 300 * time.Millisecond})
	require.True(t, f.keeper.Stop())
	require.False(t, f.keeper.Stop())
	n, _ := f.clock.Pending()
	require.Zero(t, n, "no timer is left")
	f.clock.Advance(time.Hour)
	requireHeld(t, f.keeper)
	require.ErrorIs(t, f.keeper.Renew(context.Background(), nil), pglock.ErrNotHeld)

	lostAtRelease := errors.Join(pglock.ErrLockLost, errors.New("the release found it gone"))
	f.keeper.LostBeforeStop(lostAtRelease)
	lost := testdb.Receive(t, f.lost)
	require.ErrorIs(t, lost, lostAtRelease)
	require.Equal(t, lost, f.keeper.Err())
	require.Equal(t, pglock.CauseForceReleased, pglock.CauseOf(lost))
}
