package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Contention is what Contend measured.
type Contention struct {
	Counts       []int         // steps done by each worker
	PerSecond    float64       // steps per second, all workers together
	MaxDeviation float64       // of a worker's count from a fair share, as a fraction of it
	P50, P99     time.Duration // of the waits the steps reported
	Elapsed      time.Duration
	Err          error // the first error a step returned
}

// Contend runs workers that each repeat their step until total steps are done between them.
// setup makes worker i's step (which reports how long it waited) and its teardown.
func Contend(workers, total int, setup func(worker int) (step func() (time.Duration, error), teardown func())) Contention {
	var (
		done  atomic.Int64
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
		r     = Contention{Counts: make([]int, workers)}
	)
	steps := make([]func() (time.Duration, error), workers)
	for i := range workers {
		step, teardown := setup(i)
		steps[i] = step
		defer teardown()
	}
	start := time.Now()
	for i := range workers {
		wg.Go(func() {
			for done.Add(1) <= int64(total) {
				waited, err := steps[i]()
				mu.Lock()
				if err != nil && r.Err == nil {
					r.Err = err
				}
				waits = append(waits, waited)
				r.Counts[i]++
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	r.PerSecond = float64(total) / r.Elapsed.Seconds()
	fair := float64(total) / float64(workers)
	for _, c := range r.Counts {
		r.MaxDeviation = max(r.MaxDeviation, abs(float64(c)-fair)/fair)
	}
	slices.Sort(waits)
	r.P50, r.P99 = waits[len(waits)/2], waits[len(waits)*99/100]
	return r
}

// Add combines two measurements of the same workers, as if they had run one after the other (its
// percentiles are the larger of the two: bounds).
func (r Contention) Add(other Contention) Contention {
	if r.Counts == nil {
		return other
	}
	sum := Contention{Counts: make([]int, len(r.Counts)), Elapsed: r.Elapsed + other.Elapsed,
		P50: max(r.P50, other.P50), P99: max(r.P99, other.P99), Err: errors.Join(r.Err, other.Err)}
	total := 0
	for i := range sum.Counts {
		sum.Counts[i] = r.Counts[i] + other.Counts[i]
		total += sum.Counts[i]
	}
	sum.PerSecond = float64(total) / sum.Elapsed.Seconds()
	fair := float64(total) / float64(len(sum.Counts))
	for _, c := range sum.Counts {
		sum.MaxDeviation = max(sum.MaxDeviation, abs(float64(c)-fair)/fair)
	}
	return sum
}

// Report reports the measurement as benchmark metrics named after name.
func (r Contention) Report(b *testing.B, name string) {
	b.Helper()
	if r.Err != nil {
		b.Fatal(r.Err)
	}
	b.ReportMetric(r.PerSecond, name+"-acq/s")
	b.ReportMetric(r.MaxDeviation*100, name+"-max-share-dev-%")
	b.ReportMetric(float64(r.P50.Microseconds())/1e3, name+"-p50-wait-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1e3, name+"-p99-wait-ms")
	b.Logf("%s: %.0f acquisitions/s over %s, per worker %v", name, r.PerSecond, r.Elapsed.Round(time.Millisecond), r.Counts)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// RawAdvisoryWorkers are Contend workers for the baseline the handoff benchmarks share: each
// pins a connection of its pool and hands a blocking pg_advisory_lock on key around, sent by
// hand.
func RawAdvisoryWorkers(tb testing.TB, pools []*pgxpool.Pool, key int64) func(worker int) (func() (time.Duration, error), func()) {
	return func(worker int) (func() (time.Duration, error), func()) {
		ctx := context.Background()
		conn, err := pools[worker].Acquire(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		return func() (time.Duration, error) {
			start := time.Now()
			if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
				return 0, err
			}
			waited := time.Since(start)
			_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
			return waited, err
		}, conn.Release
	}
}

// RawHandoffWorkers are Contend workers for the floor of a durable handoff queue written by
// hand: one lock row, a place per waiter, and each worker handing the lock to the next in turn.
// A handoff is one durable statement (take the next worker's place, make it the holder with a
// new token, NOTIFY its name on a channel all workers listen on, as pglock_handoff is); the
// releaser then queues again without waiting for the WAL flush. This is what any lease queue
// with direct handoff pays per acquisition on the machine, without pglock's checks, fairness
// bookkeeping or lost-notification safety nets.
func RawHandoffWorkers(tb testing.TB, pools []*pgxpool.Pool, name string) func(worker int) (func() (time.Duration, error), func()) {
	turns := make([]chan struct{}, len(pools))
	for i := range turns {
		turns[i] = make(chan struct{}, 1)
	}
	holder := func(worker int) string { return fmt.Sprintf("raw-%d", worker) }
	return func(worker int) (func() (time.Duration, error), func()) {
		ctx, cancel := context.WithCancel(context.Background())
		conn, err := pools[worker].Acquire(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		listener, err := pools[worker].Acquire(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := listener.Exec(ctx, "LISTEN pglock_raw_handoff"); err != nil {
			tb.Fatal(err)
		}
		if worker == 0 {
			if _, err := conn.Exec(ctx, rawHandoffSetupSQL, name, holder(0)); err != nil {
				tb.Fatal(err)
			}
			turns[0] <- struct{}{}
		} else if _, err := conn.Exec(ctx, rawQueueSQL, name, holder(worker)); err != nil {
			tb.Fatal(err)
		}
		var listening sync.WaitGroup
		listening.Go(func() {
			for {
				n, err := listener.Conn().WaitForNotification(ctx)
				if err != nil {
					return
				}
				if n.Payload == holder(worker) {
					turns[worker] <- struct{}{}
				}
			}
		})
		next := holder((worker + 1) % len(pools))
		return func() (time.Duration, error) {
				start := time.Now()
				select {
				case <-turns[worker]:
				case <-time.After(10 * time.Second): // a worker failed: fail too, rather than hang
					return 0, errors.New("raw handoff: no turn for 10 s")
				}
				waited := time.Since(start)
				if _, err := conn.Exec(ctx, rawHandoffSQL, name, next); err != nil {
					return 0, err
				}
				_, err := conn.Exec(ctx, rawQueueSQL, name, holder(worker))
				return waited, err
			}, func() {
				cancel()
				listening.Wait()
				// Closed, not given back: a pooled connection would go on listening, and pgx
				// would hand the notifications it buffered meanwhile to the next round's
				// listener as if they were new, a second turn in the ring.
				listener.Hijack().Close(context.Background())
				conn.Release()
			}
	}
}
