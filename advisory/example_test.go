package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/advisory"
)

// A session lock held by one process makes another's try fail at once; a transaction lock is
// released with its transaction.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	key := advisory.StringKey("maintenance/reindex")

	s, err := advisory.Open(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Lock(ctx, key); err != nil {
		log.Fatal(err)
	}
	other, err := advisory.Open(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = other.TryLock(ctx, key)
	fmt.Println("another session's try:", errors.Is(err, pglock.ErrLocked))
	other.Close(ctx)
	s.Close(ctx) // unlocks

	err = advisory.WithXactLock(ctx, pool, key, nil, func(ctx context.Context, tx pgx.Tx) error {
		fmt.Println("in the transaction, holding", key)
		return nil
	})
	fmt.Println("committed:", err)
	// Output:
	// another session's try: true
	// in the transaction, holding advisory "maintenance/reindex" (-7961543335558745569)
	// committed: <nil>
}
