package migrations_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/migrations"
)

// Up is safe to run at every start: a database already up to date is left as it is.
func Example() {
	d, done := testdb.Example() // a database the test setup has migrated already
	defer done()
	ctx := context.Background()
	if err := migrations.Up(ctx, d.Pool); err != nil {
		log.Fatal(err)
	}
	status, err := migrations.Version(ctx, d.Pool)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("up to date:", status.Version == migrations.Latest(), "dirty:", status.Dirty, "pending:", len(status.Pending))
	// Output:
	// up to date: true dirty: false pending: 0
}
