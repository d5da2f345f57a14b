package memlock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/memlock"
)

// runNightlyReport is application code: it depends on pglock.Locker, which production gives
// it as tablelock.Locker.AsLocker(nil) and its unit tests as a memlock.Locker.
func runNightlyReport(ctx context.Context, locks pglock.Locker) (string, error) {
	lk, err := locks.TryAcquire(ctx, "report:nightly")
	if err != nil {
		return "skipped: another instance runs it", nil
	}
	defer lk.Release(ctx)
	return fmt.Sprintf("ran with token %d", lk.Token()), nil
}

func Example() {
	locks, err := memlock.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	held, _ := locks.Acquire(ctx, "report:nightly") // another instance runs it
	fmt.Println(runNightlyReport(ctx, locks))
	held.Release(ctx)
	fmt.Println(runNightlyReport(ctx, locks))
	// Output:
	// skipped: another instance runs it <nil>
	// ran with token 2 <nil>
}
