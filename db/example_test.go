package db_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/db"
	"github.com/pglock/pglock/internal/testdb"
)

// Every query goes through db.Translating, the one place where PostgreSQL's errors become
// pglock's, by SQLSTATE and the argument the contract names: a TTL the contract refuses is
// pglock.ErrInvalidTTL, whatever language the server speaks.
func Example() {
	d, done := testdb.Example()
	defer done()
	q := db.New(db.Translating(d.Pool))
	_, err := q.RenewCronRun(context.Background(), db.RenewCronRunParams{ID: 1, FencingToken: 1, TtlMs: 5})
	fmt.Println(errors.Is(err, pglock.ErrInvalidTTL))
	// Output:
	// true
}
