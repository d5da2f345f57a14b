package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/ratelimit"
)

// At most 2 calls a second to a partner's API, across the whole fleet, with bursts of 3.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter, err := ratelimit.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	limit := ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 3}
	for call := 1; call <= 4; call++ {
		res, err := limiter.Allow(context.Background(), "partner-api", limit)
		if err != nil {
			log.Fatal(err)
		}
		if res.Allowed {
			fmt.Printf("call %d: allowed, %d more now\n", call, res.Remaining)
		} else {
			// The next slot opens 1/Rate after the first call, less the time the calls took.
			fmt.Printf("call %d: refused; a slot opens within 500ms: %t\n", call, res.RetryAfter > 0 && res.RetryAfter <= 500*time.Millisecond)
		}
	}
	// Output:
	// call 1: allowed, 2 more now
	// call 2: allowed, 1 more now
	// call 3: allowed, 0 more now
	// call 4: refused; a slot opens within 500ms: true
}
