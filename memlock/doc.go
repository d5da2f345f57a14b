// Package memlock is an in-memory [pglock.Locker] for the unit tests of code that takes locks:
// the same behaviour as a table lock (tokens that increase, waiters served in order, a TTL
// kept by heartbeats, Lost closed when the lock is force-released or its lease runs out,
// WithLock), in one process, with no database, on a clock the test can drive.
//
// A held lock is kept exactly as a table lock is, by pglock's lease keeper: renewed every third
// of its TTL, declared lost a tenth of its TTL before it expires when renewals fail. ForceRelease
// and Partition stand in for an operator's `pglockctl release --force` and a network partition.
// The conformance suite that tablelock passes runs against this package too.
package memlock
