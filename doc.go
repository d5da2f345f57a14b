// Package pglock coordinates work across processes with nothing but PostgreSQL: no Redis, no
// etcd, no workflow engine. Everything lives in one schema of the application's database and
// runs on the database's clock; every primitive tells its holder when it is lost.
//
// The subpackages each do one job:
//
//   - [github.com/pglock/pglock/tablelock] leases rows of distributed_locks, renewed by a
//     heartbeat, with fencing tokens that only grow, waiters served in arrival order, and
//     counting semaphores.
//   - [github.com/pglock/pglock/advisory] takes PostgreSQL's advisory locks, on a session pinned
//     to one connection or inside a transaction, with names operators can read.
//   - [github.com/pglock/pglock/jobs] runs each delivery of a job or event once: RunTx commits
//     the effect and the outcome in the caller's transaction; Run and Do run it under a lease.
//   - [github.com/pglock/pglock/cron] runs schedules across any number of instances, with no
//     leader: each tick at most once, and every tick accounted for as ran, failed, skipped,
//     missed, abandoned or canceled.
//   - [github.com/pglock/pglock/leader] elects one instance, with a term that fences the
//     leader's writes.
//   - [github.com/pglock/pglock/ratelimit] limits a key's rate across the fleet (a generic cell
//     rate algorithm).
//   - [github.com/pglock/pglock/memlock] is an in-memory [Locker] on a drivable clock, for the
//     unit tests of code that takes locks through the Locker interface.
//   - [github.com/pglock/pglock/lease] is the lease keeper of tablelock, jobs, cron, leader and
//     memlock, for a store of one's own: a heartbeat, and the loss declared a safety margin
//     before the store's expiry and signalled to the holder (redislock keeps its Redis keys
//     with it).
//   - [github.com/pglock/pglock/migrations] installs the SQL contract those packages, and
//     services in any language, call; it reports what is installed and whether it drifted.
//   - [github.com/pglock/pglock/console] is a web console for operators (pglockctl serve, or
//     mounted in an application's own server); cmd/pglockctl shows operators who holds what, and
//     lets them release, resign, pause, trigger and migrate.
//
// What works inside the caller's transaction has a form for database/sql too, for any
// PostgreSQL driver: tablelock's FenceSQL and VerifyFenceSQL, leader's FenceSQL and advisory's
// XactLockSQL take a *sql.Tx, and jobs' RunTxSQL a *sql.DB.
//
// Modules of their own, so that what they bring never enters an importer's module graph:
// otelpglock turns pglock's events into OpenTelemetry metrics and spans; gocronlock is
// go-co-op/gocron's Locker and Elector on pglock; redislock is a [Locker] on Redis, for one
// server or Redlock.
//
// This root package holds what they share: the [Locker] and [Lock] interfaces, the errors every
// package returns (to be matched with errors.Is: [ErrLocked], [ErrLockLost], …, and [CauseOf]
// says why a lease was lost), the rules for lock names ([ValidateName]), [DefaultTTL], and the
// events every package reports to a Config's [Observer]: one [Event] shape, [ObserverFunc] for
// a plain function, and [LeadershipReader] for an Observer that reads leadership when it
// exports rather than from events.
package pglock
