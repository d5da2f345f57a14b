// Package tablelock leases named locks stored as rows of distributed_locks, and tells their
// holder when they are lost.
//
// A Locker is one process's handle on the locks (create one per pool and share it). Each
// acquisition gets a holder id of its own, so two goroutines of one process never both hold a
// name, and a fencing token that strictly increases per name across every holder ever.
//
// A held Lock renews itself in the background (every third of its TTL by default). It is lost
// when a renewal finds it no longer held (force-released, or taken over after expiry) or when
// no renewal has succeeded for the TTL less a safety margin, counted from the start of the last
// successful request on this process's monotonic clock, so always before the database could give it
// to someone else. Loss closes Lost() and sets Err(), and cancels a WithLock function's context
// with cause [pglock.ErrLockLost]. A lock lives until it is released or lost, whatever happens to
// the context it was acquired with.
//
// Acquire waits in a queue kept in the database: a release hands the lock straight to the
// first live waiter in the same commit and wakes it through one LISTEN connection per Locker,
// so waiters are served in order and one release wakes one waiter. Waiters also poll: a
// Locker's first waiter of a name with capped exponential backoff and at the holder's expiry,
// waking the local waiter a lock went to, the others to keep their place. With notifications
// disabled (PgBouncer in transaction pooling mode) polls are all there is.
//
// AcquireSemaphore and TryAcquireSemaphore take one of N places of a counting semaphore: each
// place is a Lock like the others (a lease, a token, Lost, Fence), and waiters are served in
// order (docs/semaphore.md). AsLocker gives a Locker as the interface [pglock.Locker], which
// package memlock implements in memory for unit tests.
//
// For writes that must not come from a holder whose lock was lost, Lock.Fence verifies inside
// the caller's transaction that the lock is still held with its token, and keeps it so until
// commit; docs/fencing.md shows the pattern for stores that keep the last token they accepted.
package tablelock
