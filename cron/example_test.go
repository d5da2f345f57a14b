package cron_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/cron"
)

// Two instances add the same nightly schedule; an operator triggers it by hand, and exactly
// one instance runs it. The history records the run as manual.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()

	ran := make(chan cron.Run, 2)
	var instances []*cron.Scheduler
	for range 2 {
		s, err := cron.New(pool, &cron.Config{AppName: "billing"})
		if err != nil {
			log.Fatal(err)
		}
		err = s.Add("nightly-report", "CRON_TZ=Europe/Berlin 0 2 * * *", &cron.Options{Timeout: time.Hour},
			func(ctx context.Context, run cron.Run) error {
				ran <- run // write the report for run.ScheduledTime here
				return nil
			})
		if err != nil {
			log.Fatal(err)
		}
		if err := s.Start(ctx); err != nil {
			log.Fatal(err)
		}
		instances = append(instances, s)
	}

	if _, err := cron.Trigger(ctx, pool, "nightly-report", "alice"); err != nil {
		log.Fatal(err)
	}
	run := <-ran
	fmt.Printf("%s ran: %s, attempt %d\n", run.Schedule, run.Kind, run.Attempt)

	for _, s := range instances {
		if err := s.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}
	history, err := cron.History(ctx, pool, "nightly-report", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range history {
		fmt.Printf("history: %s run, %s, asked for by %s\n", r.Kind, r.Status, r.RequestedBy)
	}
	fmt.Println("runs:", len(ran)+1)
	// Output:
	// nightly-report ran: manual, attempt 1
	// history: manual run, ran, asked for by alice
	// runs: 1
}
