// Package ratelimit enforces fleet-wide rate limits: at most Rate events per Per, with bursts
// of up to Burst, for each key, exact across every instance, in one round trip per call and on
// the database's clock.
//
// It runs a generic cell rate algorithm: each key is one row holding the time at which the key
// is next as fresh as a new one, and one statement decides under that row's lock. Allow says
// at once whether an event fits, and if not, how long until it would; Wait reserves the next
// slot and sleeps until it. AllowN and WaitN take several events at once (the tokens of a
// request); AllowAll and WaitAll decide several limits all or nothing (per key and global, per
// minute and per day), locking their keys in key order; Refund gives back what a decision took
// beyond the real cost; Peek reads, Reset forgets. Keys need no cleanup: a key whose limit has recovered is as a new
// one, and the table deletes such keys on its own.
//
// Limits live in a logged table, and each decision commits without waiting for the WAL flush:
// a PostgreSQL crash forgets at most the last few hundred milliseconds of decisions.
// Config.SynchronousCommit waits for the flush; Config.Unlogged keeps the limits in an unlogged
// table, the fastest, reset by a crash. docs/ratelimit.md compares the three.
package ratelimit
