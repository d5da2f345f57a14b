package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// instances opens, for every design, a locker on a pool of its own: one instance each.
// A peer that cannot be opened is a failedLocker, whose operations fail with why.
func instances(ctx context.Context, e *env, designs []design, maxConns int32) (lockers []locker, closeAll func(), err error) {
	var pools []*pgxpool.Pool
	closeAll = func() {
		for _, l := range lockers {
			l.close()
		}
		for _, p := range pools {
			p.Close()
		}
	}
	for _, d := range designs {
		pool, err := newPool(ctx, e.url, maxConns)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pools = append(pools, pool)
		l, err := d.open(ctx, e, pool)
		if err != nil && d.peer {
			l = failedLocker{fmt.Errorf("opening it: %w", err)}
		} else if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%s: %w", d.name, err)
		}
		lockers = append(lockers, l)
	}
	return lockers, closeAll, nil
}

// uncontended: a try that takes a free name, and its release.
func uncontended(ctx context.Context, e *env, r *report, _ func(string, ...any)) error {
	lockers, closeAll, err := instances(ctx, e, e.designs, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	results, err := interleave(ctx, len(lockers), 2000, 25*time.Second, func(i int) error {
		release, err := lockers[i].try(ctx, fmt.Sprint("uncontended-", i))
		if err == nil {
			err = release(ctx)
		}
		if err != nil {
			return r.failed("uncontended acquire and release", e.designs[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.latencyTable("Uncontended acquire and release",
		"One instance takes a free name with a try and releases it, again and again; every design in turn, round by round. Each is two round trips for every design but cirello.io/pglock, which reads a sequence first and starts a heartbeat per lock that its release cancels; the Redlock designs send each to three servers at once.",
		sideBySideColumns[0], e.designs, results)
	return nil
}

// failedTry: a try on a name another instance holds, which must answer busy.
func failedTry(ctx context.Context, e *env, r *report, _ func(string, ...any)) error {
	holders, closeHolders, err := instances(ctx, e, e.designs, 2)
	if err != nil {
		return err
	}
	defer closeHolders()
	for i, h := range holders {
		release, err := h.try(ctx, fmt.Sprint("held-", i))
		if err != nil {
			if err := r.failed("a failed try", e.designs[i], fmt.Errorf("taking the held lock: %w", err)); !errors.Is(err, errPeerFailed) {
				return err
			}
			continue // its tries take the lock, and fail as such
		}
		defer release(context.Background())
	}
	lockers, closeAll, err := instances(ctx, e, e.designs, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	results, err := interleave(ctx, len(lockers), 2000, 20*time.Second, func(i int) error {
		release, err := lockers[i].try(ctx, fmt.Sprint("held-", i))
		if err == nil {
			release(ctx)
			err = errors.New("a try took a held lock")
		}
		if !errors.Is(err, errBusy) {
			return r.failed("a failed try", e.designs[i], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.latencyTable("A failed try on a held lock",
		"Another instance holds the name; a try must answer \"held\" at once. Raw SQL is the same lease upsert, which updates nothing.",
		sideBySideColumns[1], e.designs, results)
	return nil
}

// handoffResult is what a design did in the contended handoff.
type handoffResult struct {
	design       string
	waits        []time.Duration // each acquisition's wait, in no order
	perWorker    []int
	handoffs     int // acquisitions by a different worker than the one before
	overlaps     int // acquisitions made while another worker was inside: must be 0
	unfinished   int // waits cut short by the end of a slot, counted in waits at their length
	elapsed      time.Duration
	acquisitions int
}

const (
	handoffWorkers = 4
	handoffRounds  = 2
	handoffSlot    = 2500 * time.Millisecond
)

// handoff: 4 instances on one name, each taking the lock, stepping in and out at once, and
// asking again, for a slot of time per design, designs interleaved in rounds.
func handoff(ctx context.Context, e *env, r *report, _ func(string, ...any)) error {
	results := make([]handoffResult, len(e.designs))
	for i, d := range e.designs {
		results[i] = handoffResult{design: d.name, perWorker: make([]int, handoffWorkers)}
	}
	for round := range handoffRounds {
		for k := range e.designs {
			i := (round + k) % len(e.designs)
			if err := handoffSlotRun(ctx, e, e.designs[i], &results[i]); err != nil {
				if err := r.failed("4-way contended handoff", e.designs[i], err); !errors.Is(err, errPeerFailed) {
					return err
				}
			}
		}
	}
	r.handoffSection(results)
	return nil
}

func handoffSlotRun(ctx context.Context, e *env, d design, res *handoffResult) error {
	designs := make([]design, handoffWorkers)
	for i := range designs {
		designs[i] = d
	}
	lockers, closeAll, err := instances(ctx, e, designs, 4)
	if err != nil {
		return harness(err)
	}
	defer closeAll()
	slot, cancel := context.WithTimeout(ctx, handoffSlot)
	defer cancel()
	var (
		mu     sync.Mutex
		inside atomic.Int32 // holders inside the critical section: never more than one
		last   = -1
		wg     sync.WaitGroup
		errs   = make([]error, handoffWorkers)
	)
	start := time.Now()
	for w := range handoffWorkers {
		wg.Go(func() {
			for slot.Err() == nil {
				began := time.Now()
				release, err := lockers[w].acquire(slot, "handoff")
				if err != nil {
					if slot.Err() == nil {
						errs[w] = err
						return
					}
					// Still waiting when the slot ended: the wait counts at its length so
					// far, or the distribution would leave out the longest waits.
					mu.Lock()
					res.waits = append(res.waits, time.Since(began))
					res.unfinished++
					mu.Unlock()
					return
				}
				waited := time.Since(began)
				entered := inside.Add(1)
				mu.Lock()
				if entered > 1 {
					res.overlaps++
				}
				res.waits = append(res.waits, waited)
				res.perWorker[w]++
				res.acquisitions++
				if last != -1 && last != w {
					res.handoffs++
				}
				last = w
				mu.Unlock()
				inside.Add(-1)
				if err := release(context.Background()); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	res.elapsed += time.Since(start)
	return errors.Join(errs...)
}
