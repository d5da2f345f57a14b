package jobs_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/jobs"
)

// A broker delivers each message at least once; here, twice. The payment is a row in this
// database, so RunTx commits it with the outcome. The email is sent elsewhere, so Do runs it
// under a lease and saves the provider's receipt for duplicates.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE payments (order_id text PRIMARY KEY, cents int NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	dedup, err := jobs.New(pool, &jobs.Config{AppName: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	for delivery := 1; delivery <= 2; delivery++ {
		res, err := dedup.RunTx(ctx, "pay:order-42", nil, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO payments VALUES ('order-42', 990)`)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("payment, delivery %d: %s\n", delivery, res.Outcome)
	}
	for delivery := 1; delivery <= 2; delivery++ {
		receipt, res, err := jobs.Do(ctx, dedup, "email:order-42", nil, func(ctx context.Context) (string, error) {
			// Send the email here, passing "email:order-42" to the provider as its idempotency
			// key: a runner that dies after sending and before recording would send it again.
			return "msg-7", nil
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("email, delivery %d: %s, receipt %s\n", delivery, res.Outcome, receipt)
	}
	// Output:
	// payment, delivery 1: ran
	// payment, delivery 2: already done
	// email, delivery 1: ran, receipt msg-7
	// email, delivery 2: already done, receipt msg-7
}
