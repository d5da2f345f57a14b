package leader_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/leader"
)

// One candidate is elected, fences a write with its term, and resigns. Run campaigns again
// after every term, until its ctx ends: here, once the first term is over.
func Example() {
	d, done := testdb.Example()
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := d.Pool.Exec(ctx, `CREATE TABLE reconciled (term bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	e, err := leader.New(d.Pool, "billing-reconciler", &leader.Config{AppName: "billing", TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(ctx, leader.Callbacks{OnElected: func(ctx context.Context, term int64) {
		err := pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
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
