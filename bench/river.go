package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverSchema holds River's tables, installed by River's own migrations.
const riverSchema = "river"

// riverDelivery is a delivery as a River job: unique by its key, which is all its arguments.
type riverDelivery struct {
	Key string `json:"key"`
}

func (riverDelivery) Kind() string { return "bench_delivery" }

// riverDeliveryOpts make the insert River's unique one (since River v0.12): an upsert on the
// unique index of the job's kind and arguments, skipped when a job with them exists in any
// state but cancelled and discarded.
var riverDeliveryOpts = &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}

// newRiverClients migrates River into a schema of its own and returns an insert-only client on
// each pool: nothing works the jobs.
func newRiverClients(ctx context.Context, admin *pgxpool.Pool, pools []*pgxpool.Pool) ([]*river.Client[pgx.Tx], error) {
	if _, err := admin.Exec(ctx, `CREATE SCHEMA `+riverSchema); err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(admin), &rivermigrate.Config{Schema: riverSchema})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate River: %w", err)
	}
	clients := make([]*river.Client[pgx.Tx], len(pools))
	for i, pool := range pools {
		if clients[i], err = river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: riverSchema}); err != nil {
			return nil, err
		}
	}
	return clients, nil
}

// riverUniqueInsert delivers key as River's users deduplicate: the unique insert of its job and
// the effect in one transaction, the effect skipped when the insert was.
func riverUniqueInsert(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], key string,
	effect func(context.Context, pgx.Tx, string) error) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := client.InsertTx(ctx, tx, riverDelivery{Key: key}, riverDeliveryOpts)
		switch {
		case err != nil:
			return err
		case res.UniqueSkippedAsDuplicate:
			return fmt.Errorf("a new key %s was taken for a duplicate", key)
		}
		return effect(ctx, tx, key)
	})
}
