package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// redisRetry is how redislock waiters retry: its README's strategy, a try every 100 ms (it
// retries not at all by default).
const redisRetry = 100 * time.Millisecond

// redisTTL is the lease a redislock lock is taken with, as tablelock's default.
const redisTTL = 30 * time.Second

var redisDesign = design{
	name: "bsm/redislock",
	note: "`github.com/bsm/redislock` on go-redis v9 (pool 20), TTL 30 s, `LinearBackoff(100 ms)` to wait (its README's strategy; by default it does not retry); Redis on loopback, nothing persisted",
	open: func(ctx context.Context, e *env, _ *pgxpool.Pool) (locker, error) {
		client := redis.NewClient(&redis.Options{Addr: e.redisAddr, PoolSize: 20})
		return redisLocker{redislock.New(client), client}, nil
	},
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
	release, err := r.obtain(ctx, name, redislock.LinearBackoff(redisRetry))
	if errors.Is(err, errBusy) && ctx.Err() != nil {
		return nil, ctx.Err() // redislock gives up with ErrNotObtained when ctx ends
	}
	return release, err
}

func (r redisLocker) close() { r.client.Close() }

// findRedis returns the address of a Redis server that answers: PGLOCK_BENCH_REDIS_ADDR, else
// 127.0.0.1:6379, else one it starts on a free loopback port (stop stops it) if redis-server is
// on PATH. With none, it says why, and the bsm/redislock column is left out.
func findRedis(ctx context.Context) (addr string, stop func(), err error) {
	addr = os.Getenv("PGLOCK_BENCH_REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if redisAnswers(ctx, addr) {
		return addr, func() {}, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("no Redis answers at %s and redis-server is not on PATH", addr)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if redisAnswers(ctx, addr) {
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("redis-server started on %s did not answer within 10 s", addr)
}

func redisAnswers(ctx context.Context, addr string) bool {
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second})
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return client.Ping(ctx).Err() == nil
}

func redisVersion(ctx context.Context, addr string) string {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v + ", on loopback, nothing persisted"
		}
	}
	return "unknown"
}
