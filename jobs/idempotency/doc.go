// Package idempotency is net/http middleware for the Idempotency-Key header (the IETF httpapi
// draft "The Idempotency-Key HTTP Header Field"): a client that retries a POST after a timeout
// gets the first attempt's response instead of a second payment.
//
// A request that carries a key runs its handler once per key across every instance of the
// service, through a jobs.Deduper on the service's PostgreSQL: the first request runs it, and
// its response (status, the headers kept, the body) is stored with the key's record. A retry
// with the same key and the same request gets that response again, marked
// "Idempotent-Replayed: true", telling a replay from a fresh run; a retry while the first is in
// flight gets 409 Conflict (or waits for it); the same key for a different request (its
// fingerprint: by default the method, the path with its query and a hash of the body) gets
// 422. Keys live in a scope of their own, apart from the service's jobs. A response of
// the 5xx class is not stored by default: the client's retry runs the request again.
//
// docs/jobs.md has a section on it.
package idempotency
