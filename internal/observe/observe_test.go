package observe_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/observe"
	"github.com/pglock/pglock/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is an Observer that keeps what it is told, and blocks until gate, if any, is closed.
type recorder struct {
	gate chan struct{}
	mu   sync.Mutex
	got  []pglock.Event
}

func (r *recorder) Observe(_ context.Context, e pglock.Event) {
	if r.gate != nil {
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
	r := &recorder{gate: make(chan struct{})}
	m := observe.New(r, quiet)
	for i := range int64(pglock.EventBuffer + 500) {
		m.Emit(context.Background(), pglock.Event{Kind: pglock.EventReleased, Token: i})
	}
	close(r.gate)
	testdb.WaitFor(t, func() bool { n := len(r.tokens()); return n >= pglock.EventBuffer })
	tokens := r.tokens()
	require.Less(t, len(tokens), pglock.EventBuffer+500, "some were dropped")
	require.Equal(t, int64(0), tokens[0], "the oldest were kept")
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
