// Package ratelimit enforces fleet-wide rate limits: at most Rate events per Per, with bursts
// of up to Burst, for each key, exact across every instance, in one round trip per call and on
// the database's clock.
//
// It runs a generic cell rate algorithm: each key is one row holding the time at which the key
// is next as fresh as a new one, and one statement decides under that row's lock. Allow says
// at once whether an event fits, and if not, how long until it would; Wait reserves the next
// slot and sleeps until it. Keys need no cleanup: a key whose limit has recovered is as a new
// one, and the table deletes such keys on its own.
//
// Limits are durable by default (they survive a crash, and each decision waits for the WAL
// flush). Config.Unlogged keeps them in an unlogged table instead: faster, and after a
// PostgreSQL crash every limit starts afresh. docs/ratelimit.md compares the two.
package ratelimit
