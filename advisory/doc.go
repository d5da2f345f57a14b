// Package advisory takes PostgreSQL advisory locks: no table, no WAL, no fsync, the fast path
// for teams already on PostgreSQL.
//
// Session-level locks live on a Session: one connection taken from the pool and pinned until
// Close, which may hold any number of locks. The connection is health-checked; when it dies,
// every lock on it is gone, and Lost() says so (and WithLock's function sees its context
// canceled with cause [pglock.ErrLockLost]). The connection goes back to the pool only when it
// provably holds nothing; otherwise it is closed. Session locks need a session-pooled
// connection: they do not work behind PgBouncer in transaction pooling mode.
//
// Transaction-level locks (XactLock, WithXactLock) belong to a transaction and end with it.
// They are the ones that work behind PgBouncer in transaction pooling mode.
//
// Keys come from strings (a stable hash; see Key), from an int64, or from two int32s.
package advisory
