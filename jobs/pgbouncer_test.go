package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/testdb"
	"github.com/pglock/pglock/jobs"
)

// Through PgBouncer in transaction pooling (exec mode, notifications off: docs/pgbouncer.md),
// RunTx deliveries of the same keys from four instances give one effect per key, and a
// duplicate that waits (polling) gets the outcome of the attempt running elsewhere.
func TestThroughPgBouncerInTransactionPooling(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, nil)
	newEffects(t, d.Pool)
	ctx := context.Background()
	url := d.ThroughPgBouncer(t, "default_query_exec_mode=exec")
	dedupers := make([]*jobs.Deduper, 4)
	var waiterQueries testdb.QueryCounter // what the last instance sends
	for i := range dedupers {
		pool := testdb.OpenPool(t, url, func(c *pgxpool.Config) {
			if i == len(dedupers)-1 {
				c.ConnConfig.Tracer = &waiterQueries
			}
		})
		dedupers[i] = newDeduper(t, pool, &jobs.Config{DisableNotifications: true})
	}

	const keys = 20
	var wg sync.WaitGroup
	for i := range dedupers {
		for k := range keys {
			wg.Go(func() {
				key := fmt.Sprintf("order-%d", k)
				_, err := dedupers[i].RunTx(ctx, key, nil, func(ctx context.Context, tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO effects (key) VALUES ($1)`, key)
					return err
				})
				assert.NoError(t, err)
			})
		}
	}
	wg.Wait()
	var rows, distinct int
	require.NoError(t, d.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT key) FROM effects`).Scan(&rows, &distinct))
	require.Equal(t, keys, distinct, "every key's effect")
	require.Equal(t, keys, rows, "once each")

	running, finish := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		// A lease far longer than Receive waits: a duplicate that waited for it to end, as it
		// may when the run's end is announced, would never hear of the outcome in time.
		_, err := dedupers[0].Run(ctx, "waited", &jobs.Options{TTL: 2 * time.Minute}, func(context.Context) error { close(running); <-finish; return nil })
		firstDone <- err
	}()
	<-running
	waited := make(chan jobs.Result, 1)
	before := waiterQueries.Count()
	go func() {
		res, err := dedupers[3].Run(ctx, "waited", &jobs.Options{Wait: true}, func(context.Context) error {
			t.Error("a waiting duplicate ran although the first succeeded")
			return nil
		})
		assert.NoError(t, err)
		waited <- res
	}()
	// Not registered (notifications are off): it claims, claims again before it waits, checks
	// the key, and keeps checking (nothing announces the run's end).
	testdb.WaitFor(t, func() bool { return waiterQueries.Count()-before >= 3 }, "the duplicate checks the key")
	close(finish)
	require.NoError(t, testdb.Receive(t, firstDone))
	require.Equal(t, jobs.OutcomeAlreadyDone, testdb.Receive(t, waited).Outcome)
}
