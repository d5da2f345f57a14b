package lease_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/lease"
)

// store is a store of one's own: a map of leases, each with a holder and an expiry on the
// store's clock.
type store struct {
	mu     sync.Mutex
	leases map[string]entry
}

type entry struct {
	holder    string
	expiresAt time.Time
}

// take takes name for holder if nobody holds it, or its lease has expired.
func (s *store) take(name, holder string, ttl time.Duration) (expiresAt time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e, held := s.leases[name]; held && e.expiresAt.After(now) {
		return time.Time{}, false
	}
	s.leases[name] = entry{holder, now.Add(ttl)}
	return now.Add(ttl), true
}

// renew extends holder's lease, false once it is not holder's.
func (s *store) renew(name, holder string, ttl time.Duration) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e := s.leases[name]; e.holder != holder || !e.expiresAt.After(now) {
		return time.Time{}, false
	}
	s.leases[name] = entry{holder, now.Add(ttl)}
	return now.Add(ttl), true
}

// steal gives name to another holder, as an operator's force-release and another's take would.
func (s *store) steal(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leases[name] = entry{"someone else", time.Now().Add(time.Hour)}
}

// A lease on a store of one's own: taken, kept by a Keeper, and its loss signalled to the code
// running under it when a renewal finds it gone.
func Example() {
	s := &store{leases: map[string]entry{}}
	timing, err := lease.NewTiming(300*time.Millisecond, 20*time.Millisecond, 0)
	if err != nil {
		panic(err)
	}
	start := time.Now()
	expiresAt, ok := s.take("nightly-report", "me", timing.TTL)
	fmt.Println("taken:", ok)

	keeper, err := lease.New(lease.Config{
		Name: "nightly-report", Timing: timing, Start: start, ExpiresAt: expiresAt, Ctx: context.Background(),
		Renew: func(ctx context.Context, ttl time.Duration) (time.Time, bool, error) {
			expiresAt, held := s.renew("nightly-report", "me", ttl)
			return expiresAt, held, nil
		},
	})
	if err != nil {
		panic(err)
	}
	keeper.Start()
	defer keeper.Stop()

	ctx, stop := keeper.Guard(context.Background())
	defer stop()
	s.steal("nightly-report") // the next heartbeat finds the lease gone
	<-ctx.Done()
	fmt.Println(context.Cause(ctx) == keeper.Err())
	fmt.Println(keeper.Err())
	fmt.Println("cause:", pglock.CauseOf(keeper.Err()))
	// Output:
	// taken: true
	// true
	// pglock: lock lost: "nightly-report" is no longer held by this holder (force-released, or expired and taken)
	// cause: force_released
}
