package leader_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/leader"
)

// One candidate is elected, fences a write with its term, and resigns. Run campaigns again
// after every term, until its ctx ends: here, once the first term is over.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := pool.Exec(ctx, `CREATE TABLE reconciled (term bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	e, err := leader.New(pool, "billing-reconciler", &leader.Config{AppName: "billing", TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := e.Fence(ctx, tx); err != nil { // fails once another leads
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO reconciled VALUES ($1)`, term)
			return err
		})
		fmt.Println("elected; fenced write:", err)
		e.Resign(ctx) // returning would resign as well
	}, OnDemoted: func(term int64) {
		fmt.Println("demoted")
		stop()
	}})
	fmt.Println("run:", err)
	// Output:
	// elected; fenced write: <nil>
	// demoted
	// run: <nil>
}
