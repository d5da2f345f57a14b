// Package clock is the seam through which pglock reads time and sets timers, so that tests can
// drive it: Real is the process's clock (monotonic readings included), and Fake moves only when
// a test advances it.
package clock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time and runs functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the timer is stopped.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc, as time.Timer is for time.AfterFunc. It is an alias of an
// unnamed interface, so that a public package can declare the same type without naming this one.
type Timer = interface {
	// Stop prevents the call; false if it has already started or the timer was stopped.
	Stop() bool
	// Reset makes the call due d from now (again, if it had already run).
	Reset(d time.Duration) bool
}

// Real is the process's clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Fake is a clock that stands still until Advance moves it. Its zero value is not usable: make
// one with NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*fakeTimer]struct{}
	changed chan struct{} // closed and replaced whenever the set timers change
}

// NewFake returns a Fake that reads start until advanced.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: map[*fakeTimer]struct{}{}, changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at the fake time d from now.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{clock: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the time forward by d and starts the functions of the timers that have come
// due, each in its own goroutine as real timers do: they run concurrently, in no set order, and
// may still be running when Advance returns.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	for t := range c.timers {
		if !t.at.After(c.now) {
			due = append(due, t)
		}
	}
	for _, t := range due {
		delete(c.timers, t)
	}
	c.signal()
	c.mu.Unlock()
	for _, t := range due {
		go t.f()
	}
}

// Pending returns how many timers are set, and when the earliest is due (zero if none).
func (c *Fake) Pending() (n int, next time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := true
	for t := range c.timers {
		if d := t.at.Sub(c.now); first || d < next {
			next, first = d, false
		}
	}
	return len(c.timers), next
}

// WaitForTimers returns once at least n timers are set: a test's way to wait, without
// polling, until the code under test has scheduled what it will do next. It returns ctx's error
// if ctx ends first, so that a test whose code never sets them fails rather than hangs.
func (c *Fake) WaitForTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		set, changed := len(c.timers), c.changed
		c.mu.Unlock()
		if set >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("clock: %d of %d timers set: %w", set, n, context.Cause(ctx))
		}
	}
}

// signal wakes whoever waits in WaitForTimers. Called with mu held.
func (c *Fake) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type fakeTimer struct {
	clock *Fake
	f     func()
	at    time.Time
}

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	_, pending := c.timers[t]
	delete(c.timers, t)
	c.signal()
	return pending
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.clock
	c.mu.Lock()
	_, pending := c.timers[t]
	t.at = c.now.Add(d)
	c.timers[t] = struct{}{}
	c.signal()
	due := d <= 0
	if due {
		delete(c.timers, t)
	}
	c.mu.Unlock()
	if due {
		go t.f()
	}
	return pending
}
