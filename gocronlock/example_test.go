package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/gocronlock"
	"github.com/pglock/pglock/tablelock"
)

// A gocron scheduler whose jobs each run once per interval across all instances. gocron asks
// the Locker for a job's lock before each run: here the example asks it directly, as two
// instances' ticks of one interval would.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	locks, err := tablelock.New(pool, &tablelock.Config{AppName: "reports"})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)
	hourly, err := gocronlock.NewLocker(locks, 59*time.Minute, nil) // each run holds its lock 59 minutes at least
	if err != nil {
		log.Fatal(err)
	}
	scheduler, err := gocron.NewScheduler(gocron.WithDistributedLocker(hourly))
	if err != nil {
		log.Fatal(err)
	}
	defer scheduler.Shutdown()

	run, err := hourly.Lock(ctx, "report") // the first instance's tick
	fmt.Println("first tick runs:", err == nil)
	_, err = hourly.Lock(ctx, "report") // another instance's tick of the same hour
	fmt.Println("second tick skipped:", errors.Is(err, pglock.ErrLocked))
	if err := run.Unlock(ctx); err != nil { // the run ended: the lock stays until the hold is over
		log.Fatal(err)
	}
	_, err = hourly.Lock(ctx, "report") // a late tick of the same hour
	fmt.Println("late tick skipped:", errors.Is(err, pglock.ErrLocked))
	// Output:
	// first tick runs: true
	// second tick skipped: true
	// late tick skipped: true
}
