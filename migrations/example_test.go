package migrations_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/migrations"
)

// Up is safe to run at every start: a database already up to date is left as it is.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	if err := migrations.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	status, err := migrations.Version(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("up to date:", status.Version == migrations.Latest(), "dirty:", status.Dirty, "pending:", len(status.Pending))
	// Output:
	// up to date: true dirty: false pending: 0
}
