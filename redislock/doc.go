// Package redislock takes pglock's named locks on Redis, behind the same [pglock.Locker] as
// tablelock and memlock, each backend saying what it can promise (docs/redis.md).
//
// A Locker takes locks on one Redis server (or Redis Cluster: a name's keys share a hash tag).
// An acquisition is one Lua script: SET NX PX, and a fencing token from INCR on the name's
// counter. The lease runs on Redis's clock; a held Lock renews itself in the background through
// the lease keeper every pglock package uses (every third of its TTL), and is declared lost
// (Lost closed, WithLock's fn canceled with [pglock.ErrLockLost]) a safety margin before Redis
// could expire it, or as soon as a renewal finds it gone. Release and renewal check the holder
// in Lua. Acquire waits in a queue kept in Redis, served in order of arrival: a release wakes
// the first waiter through one Pub/Sub subscription per Locker, polls with jittered backoff are
// the safety net, and a waiter that stops keeping its place (a dead process) leaves the queue
// within three MaxPollIntervals, so one dead waiter never stalls the others for longer. The
// tokens are as durable as Redis's writes: with appendonly yes and appendfsync always, and no
// replica promoted over writes it had not received.
//
// A Redlock takes locks on N independent servers with the Redlock algorithm: a majority within
// the lock's validity time, released on every node, renewed by majority (and set again on a
// node that restarted empty), lost when a majority renewal fails until the validity ends. It
// outlives the loss of a minority of its nodes, but it cannot issue fencing tokens: a
// RedlockLock has no Token, and through [pglock.Lock] its Token panics with an error matching
// [pglock.ErrNoFencingToken]. docs/redis.md walks through the scenario where that matters.
package redislock
