// Package cron runs scheduled jobs on every instance of a service, each tick at most once and
// every tick accounted for (ran, failed, skipped, missed, abandoned or canceled), with no leader: instances compute the same ticks from the same spec, on the database's clock, and
// claim each tick by writing its row; the database keeps the schedules, their policies and
// pause, and the history of runs.
//
//	s, err := cron.New(pool, &cron.Config{AppName: "billing"})
//	err = s.Add("nightly-report", "CRON_TZ=Europe/Berlin 0 2 * * *", nil,
//		func(ctx context.Context, run cron.Run) error { return report(ctx, run.ScheduledTime) })
//	err = s.Start(ctx)
//	defer s.Stop(ctx)
//
// A run holds a lease that its instance renews; fn's ctx ends when it is lost, so a run never
// goes on where another instance could take its place. Overlap and catch-up policies, pause,
// manual triggers and backfills are described in docs/cron.md; Pause, Resume, Trigger,
// Backfill, List and History act on the database from any process, as pglockctl cron does.
package cron
