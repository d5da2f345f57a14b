// Package otelpglock turns pglock's events into OpenTelemetry metrics and spans.
//
// pglock's core knows nothing of OpenTelemetry: each package reports what happens through its
// Config.Observer, one [pglock.Event] shape for all of them. This module, which depends on the
// OpenTelemetry API alone, is such an Observer. Give one to every package of a process:
//
//	obs, err := otelpglock.New(nil) // the global MeterProvider and TracerProvider
//	locker, err := tablelock.New(pool, &tablelock.Config{Observer: obs})
//	deduper, err := jobs.New(pool, &jobs.Config{Observer: obs})
//	scheduler, err := cron.New(pool, &cron.Config{Observer: obs})
//
// Metrics are named pglock.*, in base units (seconds), with explicit bucket boundaries for
// waits and for runs (DefaultWaitBuckets, DefaultRunBuckets), so that a Prometheus exporter
// shows pglock_*_seconds and pglock_*_total series whose buckets mean something. Names that
// code declares — schedules, elections, semaphores, limiters, job scopes — are attributes; lock
// names, advisory keys, job keys and rate-limit keys are not, unless Options.Label maps them to
// a bounded label. docs/observability.md lists every instrument and the alerts to start with.
//
// Spans: a blocking acquisition (lock, semaphore, advisory lock) and a rate-limit wait become
// a span under the caller's span, and only under a sampled one; a job's run is a span under the
// delivery's span, its function's context carrying it; a cron run is a root span,
// pglock.cron.run, its function's context carrying it. A lost lock, lease or leadership adds an
// event to the span of the work it guarded. No heartbeat makes a span, and pglock never sets
// pgx's tracer: it passes ctx on, so the application's own pgx tracing nests as usual.
package otelpglock
