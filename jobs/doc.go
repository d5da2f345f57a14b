// Package jobs makes each job's or event's effect happen once across instances, however often a
// queue or broker delivers it, and answers every duplicate delivery with the first run's
// outcome.
//
// A Deduper keeps one record per (scope, key) in the table pglock_jobs, on the database's
// clock. A delivery claims its key in one statement; only a claim runs fn, and a duplicate
// gets OutcomeAlreadyDone (with the result the run saved), OutcomeInProgress (running elsewhere) or, with
// Options.Wait, waits for the other attempt's outcome, woken by a notification. A duplicate of
// a key already done costs one read: no transaction id, no WAL flush.
//
// Two modes, for two kinds of effect:
//
//   - RunTx, for effects in this database: fn gets the transaction, which also writes the
//     outcome. If it commits, no duplicate ever runs; if it rolls back (or its connection
//     dies), the next delivery runs again. No lease, and no round trip beyond the claim.
//   - Run and Do, for effects elsewhere: the claim commits first, and fn runs under a lease
//     that is renewed in the background. If the lease is lost, fn's context is canceled with
//     cause [pglock.ErrLockLost], and that attempt may no longer record an outcome (its fencing
//     token no longer matches), so a stale runner never marks done what another now runs. A
//     runner that crashes leaves its claim to be taken over once the lease expires.
//
// A failed attempt leaves the key to the next delivery, until Options.MaxAttempts, after which
// deliveries get an error matching [pglock.ErrGaveUp] until the key is forgotten. Records are
// kept for Options.Window (7 days by default) after their outcome; Collect deletes older ones.
//
// docs/jobs.md says what exactly-once means here, and what it cannot mean.
package jobs
