// Package pglock coordinates work across processes with nothing but PostgreSQL: no Redis, no
// etcd, no workflow engine. Everything lives in one schema of the application's database and
// runs on the database's clock; every primitive tells its holder when it is lost.
//
// The subpackages each do one job:
//
//   - tablelock leases rows of distributed_locks, renewed by a heartbeat, with fencing tokens
//     that only grow, waiters served in arrival order, and counting semaphores.
//   - advisory takes PostgreSQL's advisory locks, on a session pinned to one connection or
//     inside a transaction, with names operators can read.
//   - jobs runs each delivery of a job or event once: RunTx commits the effect and the outcome
//     in the caller's transaction; Run and Do run it under a lease.
//   - cron runs schedules across any number of instances, with no leader: each tick at most
//     once, and every tick accounted for as ran, failed, skipped, missed, abandoned or canceled.
//   - leader elects one instance, with a term that fences the leader's writes.
//   - ratelimit limits a key's rate across the fleet (a generic cell rate algorithm).
//   - memlock is an in-memory Locker on a drivable clock, for the unit tests of code that
//     takes locks through the Locker interface.
//   - migrations installs the SQL contract those packages, and services in any language, call.
//   - cmd/pglockctl shows operators who holds what, and lets them release, resign, pause,
//     trigger and migrate.
//
// This root package holds what they share: the Locker and Lock interfaces, the errors every
// package returns (to be matched with errors.Is), the rules for lock names, and DefaultTTL.
package pglock
