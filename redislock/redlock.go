package redislock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock"
)

// Redlock takes named locks on N independent Redis servers (3, 5, 7…) with the Redlock
// algorithm: a lock is held while a majority of the nodes hold it, within its validity time
// (the TTL less the time the attempt took and the clock drift allowance). It survives the loss
// of a minority of nodes, but it has no fencing token: see docs/redis.md for what that costs.
// Its methods are safe for concurrent use.
type Redlock struct {
	c     *core
	nodes []*node
}

// NewRedlock returns a Redlock on clients, one per node: an odd number, at least 3, each a
// server of its own. A nil opts means the defaults.
func NewRedlock(clients []redis.UniversalClient, opts *Options) (*Redlock, error) {
	if len(clients) < 3 || len(clients)%2 == 0 {
		return nil, errorf("%w: Redlock needs an odd number of nodes, at least 3, not %d", pglock.ErrInvalidArgument, len(clients))
	}
	cfg, err := newConfig(opts, true)
	if err != nil {
		return nil, err
	}
	nodes := make([]*node, len(clients))
	seen := map[any]int{}
	for i, client := range clients {
		if isNil(client) {
			return nil, errorf("%w: Redlock node %d: nil Redis client", pglock.ErrInvalidArgument, i)
		}
		id := any(client)
		if c, ok := client.(*redis.Client); ok {
			id = c.Options().Addr // two clients of one server are one node
		}
		if j, ok := seen[id]; ok {
			return nil, errorf("%w: Redlock nodes %d and %d are the same server (%v)", pglock.ErrInvalidArgument, j, i, id)
		}
		seen[id] = i
		nodes[i] = &node{client: client, cfg: &cfg, channel: cfg.prefix + ":released"}
	}
	q := &quorum{nodes: nodes, cfg: &cfg}
	return &Redlock{c: newCore(cfg, q, nodes), nodes: nodes}, nil
}

// TryAcquire takes the lock if a majority of the nodes give it, or returns an error matching
// [pglock.ErrLocked] (if a node said another holds it) or saying which nodes failed.
func (r *Redlock) TryAcquire(ctx context.Context, name string) (*RedlockLock, error) {
	h, err := r.c.take(ctx, name, false, false)
	return redlockOf(h), err
}

// Acquire waits until it holds the lock or ctx is done (an error matching
// [pglock.ErrLockTimeout] at ctx's deadline). Waiters are not served in order: a release wakes one
// waiter per node, and whoever gets a majority first holds it.
func (r *Redlock) Acquire(ctx context.Context, name string) (*RedlockLock, error) {
	h, err := r.c.take(ctx, name, true, false)
	return redlockOf(h), err
}

// WithLock acquires the lock as Acquire does, runs fn, and releases it. fn's ctx is canceled,
// with cause [pglock.ErrLockLost], when a majority renewal fails until the validity ends;
// WithLock then returns that error too.
func (r *Redlock) WithLock(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	h, err := r.c.take(ctx, name, true, false)
	return r.c.withLock(ctx, h, err, fn)
}

// ForceRelease deletes the lock on every node that answers; its holder learns at its next
// renewal. It reports whether any node held it.
func (r *Redlock) ForceRelease(ctx context.Context, name string) (bool, error) {
	if err := pglock.ValidateName(name); err != nil {
		return false, err
	}
	results := r.c.store.(*quorum).each(ctx, func(ctx context.Context, n *node) (int64, error) {
		released, err := n.release(ctx, name, "", false)
		return b2i(released), err
	})
	held, failed := false, []error{}
	for _, res := range results {
		held = held || res.state == 1
		if res.err != nil {
			failed = append(failed, res.err)
		}
	}
	return held, errors.Join(failed...)
}

// Close ends every lock still held, as Locker.Close does. It does not close the clients.
func (r *Redlock) Close(ctx context.Context) error { return r.c.close(ctx) }

// AsLocker returns r as a [pglock.Locker]. Its locks' Token panics with an error matching
// [pglock.ErrNoFencingToken].
func (r *Redlock) AsLocker() pglock.Locker {
	return asLocker{
		take: func(ctx context.Context, name string, wait bool) (*held, error) {
			return r.c.take(ctx, name, wait, false)
		},
		withLock: r.WithLock,
	}
}

// RedlockLock is a lock held by a majority of Redlock's nodes. It has no fencing token, and no
// method that could pass for one.
type RedlockLock struct{ h *held }

func redlockOf(h *held) *RedlockLock {
	if h == nil {
		return nil
	}
	return &RedlockLock{h}
}

// Name is the lock's name.
func (lk *RedlockLock) Name() string { return lk.h.name }

// Lost is closed once the lock is lost: a majority renewal failed until the lock's validity
// ended (less the safety margin), or a majority of the nodes no longer has it; Err then says
// why.
func (lk *RedlockLock) Lost() <-chan struct{} { return lk.h.keeper.Lost() }

// Err is nil until the lock is lost, then an error matching [pglock.ErrLockLost].
func (lk *RedlockLock) Err() error { return lk.h.keeper.Err() }

// Deadline is when, on this process's clock, the lock will be declared lost unless renewed:
// the end of its validity time less the safety margin.
func (lk *RedlockLock) Deadline() time.Time { return lk.h.keeper.Deadline() }

// Release gives the lock up on every node. An error matching [pglock.ErrLockLost] means it had
// been lost; a second Release returns one matching [pglock.ErrNotHeld].
func (lk *RedlockLock) Release(ctx context.Context) error { return lk.h.release(ctx) }

// quorum is Redlock's store: every operation goes to all nodes at once, each bounded by
// NodeTimeout, and counts by majority.
type quorum struct {
	nodes []*node
	cfg   *config
}

type nodeResult struct {
	state int64
	err   error
}

func (q *quorum) majority() int { return len(q.nodes)/2 + 1 }

// each runs op on every node at once, each within NodeTimeout.
func (q *quorum) each(ctx context.Context, op func(ctx context.Context, n *node) (int64, error)) []nodeResult {
	results := make([]nodeResult, len(q.nodes))
	var wg sync.WaitGroup
	for i, n := range q.nodes {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, q.cfg.nodeTimeout)
			defer cancel()
			results[i].state, results[i].err = op(ctx, n)
		})
	}
	wg.Wait()
	return results
}

func (q *quorum) attempt(ctx context.Context, name, holder, waiter string) (attempt, error) {
	start := time.Now()
	results := q.each(ctx, func(ctx context.Context, n *node) (int64, error) {
		a, err := n.attempt(ctx, name, holder, waiter, false, false)
		if err != nil || !a.held {
			return -int64(a.retryIn), err
		}
		return 1, nil
	})
	taken, busy, retryIn, failed := 0, 0, time.Duration(0), []error{}
	for i, res := range results {
		switch {
		case res.err != nil:
			failed = append(failed, fmt.Errorf("node %d: %w", i, res.err))
		case res.state == 1:
			taken++
		default:
			busy++
			if d := time.Duration(-res.state); d > 0 && (retryIn == 0 || d < retryIn) {
				retryIn = d
			}
		}
	}
	// Held within its validity: the TTL less the time taken and the safety margin (which
	// covers the clock drift allowance), as the lock's keeper counts it.
	if taken >= q.majority() && time.Since(start) < q.cfg.timing.TTL-q.cfg.timing.Margin {
		return attempt{held: true}, nil
	}
	if taken > 0 || len(failed) > 0 {
		// Give back what may have been taken, so that the next attempt (anyone's) finds it free.
		q.each(context.WithoutCancel(ctx), func(ctx context.Context, n *node) (int64, error) {
			released, err := n.release(ctx, name, holder, true)
			return b2i(released), err
		})
	}
	if busy > 0 {
		return attempt{retryIn: retryIn}, nil
	}
	return attempt{}, errorf("acquire %q: %d of %d nodes gave it, a majority is %d: %w",
		name, taken, len(q.nodes), q.majority(), errors.Join(failed...))
}

// renew extends holder's lock on every node. With a majority renewed, it is set again where it
// was gone (a node restarted empty), which only widens a majority already held; never where
// the renewal did not reach a majority, which would undo a force release (one racing the
// renewal can still leave a key set again on a minority: it expires, and the next renewal
// finds the majority gone).
func (q *quorum) renew(ctx context.Context, name, holder string, ttl time.Duration) (time.Time, bool, error) {
	start := time.Now()
	results := q.each(ctx, func(ctx context.Context, n *node) (int64, error) { return n.extend(ctx, name, holder, ttl) })
	renewed, gone, failed := 0, 0, []error{}
	for i, res := range results {
		switch {
		case res.err != nil:
			failed = append(failed, fmt.Errorf("node %d: %w", i, res.err))
		case res.state == 1:
			renewed++
		default:
			gone++ // expired, deleted, or another holder's
		}
	}
	if renewed >= q.majority() {
		var wg sync.WaitGroup
		for i, res := range results {
			if res.err == nil && res.state == 0 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(ctx, q.cfg.nodeTimeout)
					defer cancel()
					q.nodes[i].retake(ctx, name, holder, ttl)
				})
			}
		}
		wg.Wait()
		return start.Add(ttl), true, nil
	}
	if gone > len(q.nodes)-q.majority() {
		return time.Time{}, false, nil // a majority can no longer be this holder's
	}
	return time.Time{}, false, errorf("renew %q: %d of %d nodes renewed it, a majority is %d: %w",
		name, renewed, len(q.nodes), q.majority(), errors.Join(failed...))
}

// release frees holder's lock on every node. It was held if some node released it and no
// majority answered that it was gone or another's; with a node that did not answer, the error
// says so (and the caller tries that again).
func (q *quorum) release(ctx context.Context, name, holder string, giveBack bool) (bool, error) {
	results := q.each(ctx, func(ctx context.Context, n *node) (int64, error) {
		released, err := n.release(ctx, name, holder, giveBack)
		return b2i(released), err
	})
	released, gone, failed := 0, 0, []error{}
	for i, res := range results {
		switch {
		case res.err != nil:
			failed = append(failed, fmt.Errorf("node %d: %w", i, res.err))
		case res.state == 1:
			released++
		default:
			gone++
		}
	}
	if gone >= q.majority() {
		return false, nil
	}
	if len(failed) > 0 {
		return released > 0, errorf("release %q: %d of %d nodes did not answer: %w", name, len(failed), len(q.nodes), errors.Join(failed...))
	}
	return released > 0, nil
}

func (q *quorum) leave(ctx context.Context, name, waiter string) {
	q.each(ctx, func(ctx context.Context, n *node) (int64, error) { return 0, n.leave(ctx, name, waiter) })
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
