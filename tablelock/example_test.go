package tablelock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/tablelock"
)

// At most 2 instances call a partner's API at once: a semaphore of 2. A third waits
// (AcquireSemaphore) or, as here, tries and is refused.
func ExampleLocker_AcquireSemaphore() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	locker, err := tablelock.New(pool, &tablelock.Config{AppName: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	defer locker.Close(ctx)

	first, err := locker.AcquireSemaphore(ctx, "partner-api", 2, nil)
	if err != nil {
		log.Fatal(err)
	}
	second, err := locker.AcquireSemaphore(ctx, "partner-api", 2, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquireSemaphore(ctx, "partner-api", 2, nil)
	fmt.Println("third:", errors.Is(err, pglock.ErrLocked))
	first.Release(ctx)
	third, err := locker.TryAcquireSemaphore(ctx, "partner-api", 2, nil)
	fmt.Println("third, after a release:", err == nil, third.Token() > second.Token())
	second.Release(ctx)
	third.Release(ctx)
	// Output:
	// third: true
	// third, after a release: true true
}
