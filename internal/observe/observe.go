// Package observe delivers a primitive's events to its pglock.Observer without ever making the
// primitive wait for it.
package observe

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pglock/pglock"
)

// Emitter hands events to an Observer on a goroutine of its own, in order, in batches at most
// deliveryDelay old. A nil *Emitter (no Observer) does nothing, at the cost of a nil check.
type Emitter struct {
	obs       pglock.Observer
	logger    *slog.Logger
	queue     chan item
	scheduled atomic.Bool // a delivery is due, or under way
	dropped   atomic.Uint64
}

// deliveryDelay is how long an event may wait for the batch it is delivered in. A goroutine
// woken per event would cost a short operation (a try and a release, about 0.6 ms on two cores)
// a tenth of its time, in the wake-ups of idle processors that compete with the database's.
const deliveryDelay = 5 * time.Millisecond

type item struct {
	ctx context.Context
	e   pglock.Event
}

// New returns an Emitter for obs, or nil when obs is nil.
func New(obs pglock.Observer, logger *slog.Logger) *Emitter {
	if obs == nil {
		return nil
	}
	return &Emitter{obs: obs, logger: logger, queue: make(chan item, pglock.EventBuffer)}
}

// Emit queues e for the Observer; a full queue drops it. It never blocks. The goroutine that
// delivers starts deliveryDelay after the first event of a batch and exits once the queue is
// empty, so that an idle primitive keeps none.
func (m *Emitter) Emit(ctx context.Context, e pglock.Event) {
	if m == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	select {
	case m.queue <- item{ctx, e}:
	default:
		if n := m.dropped.Add(1); n&(n-1) == 0 { // 1, 2, 4, 8...: a stuck Observer logs, but not per event
			m.logger.Warn("pglock: observer too slow; events dropped", "dropped", n, "kind", e.Kind)
		}
	}
	if m.scheduled.CompareAndSwap(false, true) {
		time.AfterFunc(deliveryDelay, m.deliver)
	}
}

func (m *Emitter) deliver() {
	for {
		select {
		case it := <-m.queue:
			m.observe(it)
		default:
			m.scheduled.Store(false)
			// An Emit between the empty read and the Store saw a delivery scheduled and left its
			// event to us.
			if len(m.queue) == 0 || !m.scheduled.CompareAndSwap(false, true) {
				return
			}
		}
	}
}

func (m *Emitter) observe(it item) {
	defer m.recover(it.e)
	m.obs.Observe(it.ctx, it.e)
}

// Begin calls the Observer's Begin on the caller's goroutine, and returns ctx if there is none
// or it panics.
func (m *Emitter) Begin(ctx context.Context, e pglock.Event) (runCtx context.Context) {
	if m == nil {
		return ctx
	}
	runCtx = ctx
	defer m.recover(e)
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if c := m.obs.Begin(ctx, e); c != nil {
		runCtx = c
	}
	return runCtx
}

func (m *Emitter) recover(e pglock.Event) {
	if r := recover(); r != nil {
		m.logger.Error("pglock: observer panicked", "kind", e.Kind, "panic", r)
	}
}

// AcquireOutcome classifies the error of an acquisition for its event.
func AcquireOutcome(err error) pglock.Outcome {
	switch {
	case err == nil:
		return pglock.OutcomeAcquired
	case errors.Is(err, pglock.ErrLockTimeout): // before ErrLocked, which a timeout may match too
		return pglock.OutcomeTimeout
	case errors.Is(err, pglock.ErrLocked):
		return pglock.OutcomeNotAcquired
	case errors.Is(err, context.Canceled), errors.Is(err, pglock.ErrClosed):
		return pglock.OutcomeCanceled
	}
	return pglock.OutcomeError
}
