// Package lease keeps a lease held in a store of your own the way pglock keeps its own: renewed
// in the background, declared lost a safety margin before the store could give it to anyone
// else, and that loss signalled to its holder (Lost, Err, and the context Guard hands the code
// running under the lease).
//
// tablelock, jobs, cron and leader keep their rows with this keeper; redislock keeps its Redis
// keys with it through this package. A backend needs three things of its store: a write that
// takes the lease and says when it ends by the store's clock, a renewal that extends it only
// while it is still the holder's ([RenewFunc]), and a release. The keeper does the rest:
//
//   - the heartbeat, every [Timing.Heartbeat], retried with [RetryBackoff] when it fails;
//   - the deadline: start of the last successful renewal + TTL − margin, on this process's
//     clock, so that the loss is declared before the store's expiry whatever the network did;
//   - one loss, once, with a [pglock.Cause] ([pglock.CauseOf] reads it from [Keeper.Err]).
package lease
