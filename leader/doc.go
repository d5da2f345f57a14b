// Package leader runs named leader elections whose terms fence writes.
//
// An Elector campaigns in one election; any number of elections share a database. Leadership
// is holding a table lock (package tablelock) named after the election: candidates wait for it
// in the lock's queue, woken by the shared listener, and the term is the lock's fencing token,
// so terms strictly increase across every leader the election ever had.
//
// Run campaigns until its context ends, never once only: each time the Elector is elected it
// calls OnElected with a context that is canceled when leadership ends for any reason — Resign,
// Run's context ending, a renewal that finds the lock gone, or renewals failing for the TTL less
// its safety margin, always before the lease could expire on the database — and then
// campaigns again. The lock is released as soon as leadership ends, which hands it to the next
// candidate in the same commit; OnDemoted follows once OnElected has returned. A leader that
// crashes is replaced once its lease expires.
//
// Fence verifies inside the caller's transaction that the Elector still leads with its term,
// and keeps it so until commit: a deposed leader's writes fail instead of landing after its
// successor's. docs/leader.md shows the pattern and how failover time follows from the TTL.
package leader
