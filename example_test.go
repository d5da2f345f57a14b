package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/memlock"
)

// Code that takes locks depends on pglock.Locker and checks outcomes with errors.Is against the
// root's sentinels, whichever implementation it is given: tablelock's in production
// (Locker.AsLocker), memlock's in unit tests, as here.
func Example() {
	var locks pglock.Locker
	locks, err := memlock.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	first, err := locks.TryAcquire(ctx, "invoice:2026-11")
	if err != nil {
		log.Fatal(err)
	}
	_, err = locks.TryAcquire(ctx, "invoice:2026-11")
	fmt.Println("second try:", errors.Is(err, pglock.ErrLocked))
	_, err = locks.TryAcquire(ctx, "")
	fmt.Println("empty name:", errors.Is(err, pglock.ErrInvalidName))
	fmt.Println("release:", first.Release(ctx))
	// Output:
	// second try: true
	// empty name: true
	// release: <nil>
}
