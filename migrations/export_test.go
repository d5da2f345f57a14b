package migrations

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/internal/db"
)

// Manifest is what make generate writes for version, read from a database migrated to it.
func Manifest(ctx context.Context, pool *pgxpool.Pool, version uint) (string, error) {
	var live []object
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		q := db.New(tx)
		scope, err := q.MigrationScope(ctx)
		if err != nil {
			return err
		}
		if err := q.SearchOnlySchema(ctx, scope.Schema); err != nil {
			return err
		}
		live, err = installed(ctx, q, scope.Schema)
		return err
	})
	return render(version, live), err
}
