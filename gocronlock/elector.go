package gocronlock

import (
	"context"
	"sync"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/leader"
)

// Elector is a gocron.Elector: it campaigns in a leader election from NewElector until Close,
// and IsLeader lets a run go ahead only while it leads. Install it with
// gocron.WithDistributedElector.
type Elector struct {
	leader   *leader.Elector
	election string
	stop     context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	err      error // Run's
}

// NewElector campaigns in election on pool, as [leader.New] and Run do with cfg, until ctx ends or
// Close is called.
func NewElector(ctx context.Context, pool *pgxpool.Pool, election string, cfg *leader.Config) (*Elector, error) {
	l, err := leader.New(pool, election, cfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(ctx)
	e := &Elector{leader: l, election: election, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		err := l.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, _ int64) { <-ctx.Done() }})
		e.mu.Lock()
		e.err = err
		e.mu.Unlock()
	}()
	return e, nil
}

// IsLeader returns nil while this Elector leads: elected, and its lease valid by this process's
// monotonic clock less its safety margin ([leader.Elector.IsLeader]), without a round trip; else an
// error matching [pglock.ErrNotHeld], which makes gocron skip the run.
func (e *Elector) IsLeader(context.Context) error {
	if e.leader.IsLeader() {
		return nil
	}
	return errorf("%w: not the leader of election %q", pglock.ErrNotHeld, e.election)
}

// Leader returns the leader election, whose Term and Fence (or FenceSQL) fence a run's writes.
func (e *Elector) Leader() *leader.Elector { return e.leader }

// Close stops campaigning, handing leadership on if it leads, and returns the campaign's error
// if it ended with one (bad configuration, a database not migrated).
func (e *Elector) Close() error {
	e.stop()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

var _ gocron.Elector = (*Elector)(nil)
