package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/redislock"
)

// A Locker on one Redis server: WithLock for a critical section, and a held Lock's fencing
// token for the store it writes to.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer client.Close()
	locks, err := redislock.New(client, &redislock.Options{AppName: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)

	err = locks.WithLock(ctx, "report:daily", func(ctx context.Context) error {
		// ctx is canceled, with cause pglock.ErrLockLost, if the lock is lost meanwhile.
		fmt.Println("running the daily report")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	lk, err := locks.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locks.TryAcquire(ctx, "invoice:42")
	fmt.Println("held by another:", errors.Is(err, pglock.ErrLocked))
	holder, err := locks.Holder(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holder:", strings.HasPrefix(holder.Instance, "billing@"), "token matches:", holder.Token == lk.Token())
	if err := lk.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// running the daily report
	// held by another: true
	// holder: true token matches: true
}

// A Redlock on three independent servers has no fencing token: its lock has no Token method,
// and through pglock.Lock, Token panics.
func ExampleRedlock() {
	ctx := context.Background()
	var clients []redis.UniversalClient
	for _, addr := range strings.Fields(os.Getenv("REDLOCK_ADDRS")) {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		clients = append(clients, c)
	}
	locks, err := redislock.NewRedlock(clients, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)

	var locker pglock.Locker = locks.AsLocker()
	lk, err := locker.Acquire(ctx, "cache:warm")
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Release(ctx)
	defer func() {
		err, _ := recover().(error)
		fmt.Println("no fencing token:", errors.Is(err, pglock.ErrNoFencingToken))
	}()
	lk.Token()
	// Output:
	// no fencing token: true
}
