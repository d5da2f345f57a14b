package observe_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/observe"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is an Observer that keeps what it is told, and blocks until gate, if any, is
// closed, telling entered first.
type recorder struct {
	gate    chan struct{}
	entered chan struct{}
	mu      sync.Mutex
	got     []pglock.Event
}

func (r *recorder) Observe(_ context.Context, e pglock.Event) {
	if r.gate != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind == "panic" {
		panic("observer bug")
	}
	r.got = append(r.got, e)
}

func (r *recorder) Begin(ctx context.Context, e pglock.Event) context.Context {
	if e.Kind == "panic" {
		panic("observer bug")
	}
	return context.WithValue(ctx, r, e.Name)
}

func (r *recorder) tokens() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var tokens []int64
	for _, e := range r.got {
		tokens = append(tokens, e.Token)
	}
	return tokens
}

func TestEventsArriveInOrderAndStampedWithTheirTime(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	m := observe.New(r, quiet)
	var want []int64
	for i := range int64(1000) {
		m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: i})
		want = append(want, i)
	}
	testdb.WaitFor(t, func() bool { return len(r.tokens()) == len(want) })
	require.Equal(t, want, r.tokens())
	r.mu.Lock()
	defer r.mu.Unlock()
	require.False(t, r.got[0].Time.IsZero())
}

// A stuck Observer never blocks Emit: what does not fit in the buffer is dropped.
func TestAStuckObserverDropsEventsInsteadOfBlocking(t *testing.T) {
	t.Parallel()
	r := &recorder{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	m := observe.New(r, quiet)
	m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: 0})
	testdb.Receive(t, r.entered) // the delivery is stuck in the Observer
	for i := range int64(pglock.EventBuffer + 500) {
		m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: 1 + i})
	}
	close(r.gate)
	testdb.WaitFor(t, func() bool { return len(r.tokens()) == 1+pglock.EventBuffer }, "the first, and a full buffer")
	tokens := r.tokens()
	require.Equal(t, int64(0), tokens[0])
	require.Equal(t, int64(pglock.EventBuffer), tokens[len(tokens)-1], "the oldest were kept, the last 500 dropped")
}

// A loss is delivered at once, with what waits before it, not with the next batch.
func TestALossIsDeliveredAtOnce(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	m := observe.NewWithDelay(r, quiet, time.Hour) // no batch is delivered during the test
	m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: 1})
	m.Emit(context.Background(), pglock.Event{Kind: pglock.EventLost, Token: 2})
	testdb.WaitFor(t, func() bool { return len(r.tokens()) == 2 }, "the loss, and the release before it")
	require.Equal(t, []int64{1, 2}, r.tokens())
}

// A panic in Observe is recovered: later events still arrive; a panic in Begin leaves ctx as
// it was.
func TestAPanickingObserverIsRecovered(t *testing.T) {
	t.Parallel()
	r := &recorder{}
	m := observe.New(r, quiet)
	m.Emit(context.Background(), pglock.Event{Kind: "panic"})
	m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: 7})
	testdb.WaitFor(t, func() bool { return len(r.tokens()) == 1 })
	require.Equal(t, []int64{7}, r.tokens())

	ctx := context.Background()
	require.Equal(t, ctx, m.Begin(ctx, pglock.Event{Kind: "panic"}))
	require.Equal(t, "run", m.Begin(ctx, pglock.Event{Kind: pglock.EventJobRun, Name: "run"}).Value(r))
}

// Without an Observer there is no Emitter, and its methods do nothing.
func TestNoObserverNoEmitter(t *testing.T) {
	t.Parallel()
	m := observe.New(nil, quiet)
	require.Nil(t, m)
	m.Emit(context.Background(), pglock.Event{})
	ctx := context.Background()
	require.Equal(t, ctx, m.Begin(ctx, pglock.Event{}))
}

func TestAcquireOutcomes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want pglock.Outcome
	}{
		{nil, pglock.OutcomeAcquired},
		{pglock.ErrLocked, pglock.OutcomeNotAcquired},
		{errors.Join(pglock.ErrLockTimeout, pglock.ErrLocked), pglock.OutcomeTimeout},
		{context.Canceled, pglock.OutcomeCanceled},
		{pglock.ErrClosed, pglock.OutcomeCanceled},
		{io.ErrUnexpectedEOF, pglock.OutcomeError},
	} {
		require.Equal(t, c.want, observe.AcquireOutcome(c.err), "%v", c.err)
	}
}
