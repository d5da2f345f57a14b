package databasesql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"

	"github.com/pglock/pglock/jobs"
	"github.com/pglock/pglock/tablelock"
)

// A service on sqlx (GORM, ent and bun are alike: each sits on a *sql.DB) shares one pgx pool
// with pglock. stdlib.OpenDBFromPool gives sqlx a *sql.DB on the pool's connections; the Locker
// and the Deduper take the pool itself; and the service's own transactions, the *sql.Tx under
// sqlx.Tx, are fenced with FenceSQL and deduplicated with RunTxSQL.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	db := sqlx.NewDb(stdlib.OpenDBFromPool(pool), "pgx")
	defer db.Close()
	db.MustExecContext(ctx, `CREATE TABLE invoices (id text PRIMARY KEY, cents int NOT NULL, fence bigint NOT NULL)`)

	// A fenced write: it commits only while the lock is held with its token.
	locker, err := tablelock.New(pool, &tablelock.Config{AppName: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)
	lk, err := locker.Acquire(ctx, "invoices", nil)
	if err != nil {
		log.Fatal(err)
	}
	tx := db.MustBeginTx(ctx, nil)
	if err := lk.FenceSQL(ctx, tx.Tx); err != nil {
		log.Fatal(err)
	}
	tx.MustExecContext(ctx, `INSERT INTO invoices VALUES ('inv-1', 990, $1)`, lk.Token())
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// A message delivered twice: its effect commits once, with its outcome.
	dedup, err := jobs.New(pool, &jobs.Config{AppName: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	for delivery := 1; delivery <= 2; delivery++ {
		res, err := dedup.RunTxSQL(ctx, db.DB, "invoice:inv-2", nil, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ('inv-2', 1250, 0)`)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("delivery %d: %s\n", delivery, res.Outcome)
	}
	var invoices int
	if err := db.GetContext(ctx, &invoices, `SELECT count(*) FROM invoices`); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoices:", invoices)
	// Output:
	// delivery 1: ran
	// delivery 2: already done
	// invoices: 2
}
