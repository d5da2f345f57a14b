package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/testredis"
	"github.com/pglock/pglock/redislock"
)

// redlockNodes is how many independent servers the Redlock designs (ours and redsync) run on.
const redlockNodes = 3

// startRedlockNodes starts the Redlock designs' servers, on loopback ports of their own with
// nothing persisted, as bsm/redislock's is.
func startRedlockNodes(ctx context.Context) (addrs []string, stop func(), err error) {
	var servers []*testredis.Server
	stop = func() {
		for _, s := range servers {
			s.Remove()
		}
	}
	for range redlockNodes {
		s, err := testredis.Start(ctx, nil)
		if err != nil {
			stop()
			return nil, nil, err
		}
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	return addrs, stop, nil
}

// redisClients are an instance's clients of addrs, a pool of 20 each as bsm/redislock's.
func redisClients(addrs []string) []redis.UniversalClient {
	clients := make([]redis.UniversalClient, len(addrs))
	for i, addr := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 20})
	}
	return clients
}

func closeClients(clients []redis.UniversalClient) {
	for _, c := range clients {
		c.Close()
	}
}

var pglockRedisDesign = design{
	name:       "redislock (pglock)",
	note:       "pglock's `redislock.Locker` on the same server as bsm/redislock (a pool of 20), TTL 30 s renewed every 10 s; `Acquire` waits in its fair queue, woken by the release over Pub/Sub",
	redisNodes: func(e *env) []string { return []string{e.redisAddr} },
	open: func(ctx context.Context, e *env, _ *pgxpool.Pool) (locker, error) {
		return openPglockRedis([]string{e.redisAddr}, func(clients []redis.UniversalClient) (pglockRedis, error) {
			return redislock.New(clients[0], &redislock.Options{Prefix: "pglock-bench", AppName: "bench"})
		})
	},
}

var pglockRedlockDesign = design{
	name:       "redislock Redlock (pglock)",
	note:       fmt.Sprintf("pglock's `redislock.Redlock` on %d servers of its own (a pool of 20 each), TTL 30 s renewed every 10 s, 100 ms per node; `Acquire` woken by a release over Pub/Sub, in no order", redlockNodes),
	redisNodes: func(e *env) []string { return e.redlockAddrs },
	open: func(ctx context.Context, e *env, _ *pgxpool.Pool) (locker, error) {
		return openPglockRedis(e.redlockAddrs, func(clients []redis.UniversalClient) (pglockRedis, error) {
			return redislock.NewRedlock(clients, &redislock.Options{Prefix: "pglock-bench", AppName: "bench"})
		})
	},
}

// pglockRedis is what the benchmark uses of redislock.Locker and redislock.Redlock.
type pglockRedis interface {
	AsLocker() pglock.Locker
	Close(ctx context.Context) error
}

// openPglockRedis opens an instance of one of pglock's Redis Lockers on clients of its own.
func openPglockRedis(addrs []string, open func([]redis.UniversalClient) (pglockRedis, error)) (locker, error) {
	clients := redisClients(addrs)
	l, err := open(clients)
	if err != nil {
		closeClients(clients)
		return nil, err
	}
	return &pglockRedisLocker{l.AsLocker(), func() { l.Close(context.Background()); closeClients(clients) }}, nil
}

type pglockRedisLocker struct {
	l    pglock.Locker
	done func()
}

func (p *pglockRedisLocker) lock(ctx context.Context, name string, wait bool) (func(context.Context) error, error) {
	take := p.l.TryAcquire
	if wait {
		take = p.l.Acquire
	}
	lk, err := take(ctx, name)
	if errors.Is(err, pglock.ErrLocked) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

func (p *pglockRedisLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	return p.lock(ctx, name, false)
}

func (p *pglockRedisLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	return p.lock(ctx, name, true)
}

func (p *pglockRedisLocker) close() { p.done() }

var redsyncDesign = design{
	name:       "go-redsync/redsync",
	note:       fmt.Sprintf("`github.com/go-redsync/redsync/v4` (Redlock) on the same %d servers as pglock's Redlock (go-redis v9, a pool of 20 each), TTL 30 s, no refresh; waits by retrying with its default delay (50–250 ms, random)", redlockNodes),
	redisNodes: func(e *env) []string { return e.redlockAddrs },
	peer:       true,
	open: func(ctx context.Context, e *env, _ *pgxpool.Pool) (locker, error) {
		clients := redisClients(e.redlockAddrs)
		pools := make([]redsyncredis.Pool, len(clients))
		for i, c := range clients {
			pools[i] = redsyncgoredis.NewPool(c)
		}
		return &redsyncLocker{redsync.New(pools...), clients}, nil
	},
}

type redsyncLocker struct {
	rs      *redsync.Redsync
	clients []redis.UniversalClient
}

func (r *redsyncLocker) lock(ctx context.Context, name string, tries int) (func(context.Context) error, error) {
	m := r.rs.NewMutex("pglock-bench-redsync:"+name, redsync.WithExpiry(redisTTL), redsync.WithTries(tries))
	err := m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if tries == 1 && (errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed)) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock released it on no node")
		}
		return err
	}, nil
}

func (r *redsyncLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	return r.lock(ctx, name, 1)
}

func (r *redsyncLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	return r.lock(ctx, name, math.MaxInt32)
}

func (r *redsyncLocker) close() { closeClients(r.clients) }

// describeRedlockNodes says which servers the Redlock columns ran on.
func describeRedlockNodes(ctx context.Context, addrs []string) string {
	version := strings.SplitN(describeRedis(ctx, addrs[0], true), ",", 2)[0]
	return fmt.Sprintf("%d servers of %s, started by the benchmark on loopback, nothing persisted", len(addrs), version)
}
