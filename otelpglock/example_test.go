package otelpglock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pglock/pglock/otelpglock"
	"github.com/pglock/pglock/tablelock"
)

// One Observer serves every package of a process, given as each Config's Observer. Here its
// meters are an SDK's with a reader the example collects from; in a service they are the
// global provider's (otel.GetMeterProvider), exported as the service exports the rest.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reader := sdkmetric.NewManualReader()
	obs, err := otelpglock.New(&otelpglock.Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		log.Fatal(err)
	}
	locker, err := tablelock.New(pool, &tablelock.Config{AppName: "billing", Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	lk, err := locker.TryAcquire(ctx, "invoice-7", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := locker.Close(ctx); err != nil {
		log.Fatal(err)
	}

	// Events reach the Observer off the Locker's goroutines, a few milliseconds later.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := histogramCount(ctx, reader, "pglock.lock.held.duration"); n > 0 {
			fmt.Println("locks held, then released:", n)
			break
		}
	}
	// Output: locks held, then released: 1
}

// histogramCount is how many samples the histogram name has, over all its attributes.
func histogramCount(ctx context.Context, reader *sdkmetric.ManualReader, name string) uint64 {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var n uint64
	for _, scope := range rm.ScopeMetrics {
		for _, m := range scope.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range h.DataPoints {
					n += p.Count
				}
			}
		}
	}
	return n
}
