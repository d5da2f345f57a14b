package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock/internal/testdb"
)

// redisRetry is how redislock waiters retry: its README's strategy, a try every 100 ms (it
// retries not at all by default).
const redisRetry = 100 * time.Millisecond

// redisTTL is the lease a redislock lock is taken with, as tablelock's default.
const redisTTL = 30 * time.Second

var redisDesign = design{
	name: "bsm/redislock",
	note: "`github.com/bsm/redislock` on go-redis v9 (a pool of 20), TTL 30 s, `LinearBackoff(100 ms)` to wait (its README's strategy; by default it does not retry)",
	open: func(ctx context.Context, e *env, _ *pgxpool.Pool) (locker, error) {
		return newRedisLocker(e.redisAddr, 0), nil
	},
	redisNodes: func(e *env) []string { return []string{e.redisAddr} },
	peer:       true,
}

// newRedisLocker is an instance's locker on logical database db of the Redis at addr.
func newRedisLocker(addr string, db int) redisLocker {
	client := redis.NewClient(&redis.Options{Addr: addr, DB: db, PoolSize: 20})
	return redisLocker{redislock.New(client), client}
}

type redisLocker struct {
	l      *redislock.Client
	client *redis.Client
}

func (r redisLocker) obtain(ctx context.Context, name string, retry redislock.RetryStrategy) (func(context.Context) error, error) {
	lk, err := r.l.Obtain(ctx, "pglock-bench:"+name, redisTTL, &redislock.Options{RetryStrategy: retry})
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errBusy
	}
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

func (r redisLocker) try(ctx context.Context, name string) (func(context.Context) error, error) {
	return r.obtain(ctx, name, nil)
}

func (r redisLocker) acquire(ctx context.Context, name string) (func(context.Context) error, error) {
	return r.obtain(ctx, name, redislock.LinearBackoff(redisRetry))
}

func (r redisLocker) close() { r.client.Close() }

// findRedis returns the address of a Redis server for the bsm/redislock column: one it starts on
// a free loopback port, with nothing persisted, when redis-server is on PATH (so that its
// counters count the benchmark alone); otherwise the one at PGLOCK_BENCH_REDIS_ADDR or
// 127.0.0.1:6379, if it answers. owned says which; stop stops a server it started. With
// neither, it says why, and the column is left out.
func findRedis(ctx context.Context) (addr string, owned bool, stop func(), err error) {
	if bin, err := exec.LookPath("redis-server"); err == nil {
		port, err := testdb.FreePort()
		if err != nil {
			return "", false, nil, err
		}
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no")
		if err := cmd.Start(); err != nil {
			return "", false, nil, err
		}
		stop = func() { cmd.Process.Kill(); cmd.Wait() }
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if redisAnswers(ctx, addr) {
				return addr, true, stop, nil
			}
		}
		stop()
		return "", false, nil, fmt.Errorf("redis-server started on %s did not answer within 10 s", addr)
	}
	addr = os.Getenv("PGLOCK_BENCH_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if redisAnswers(ctx, addr) {
		return addr, false, func() {}, nil
	}
	return "", false, nil, fmt.Errorf("redis-server is not on PATH and no Redis answers at %s", addr)
}

func redisAnswers(ctx context.Context, addr string) bool {
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return client.Ping(ctx).Err() == nil
}

// describeRedis says which Redis the column ran on.
func describeRedis(ctx context.Context, addr string, owned bool) string {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	version := "unknown version"
	if info, err := client.Info(ctx, "server").Result(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	if owned {
		return version + ", started by the benchmark on loopback, nothing persisted"
	}
	return version + ", an existing server at " + addr + " (its counters include any other client's traffic)"
}
