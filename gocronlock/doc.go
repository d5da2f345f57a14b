// Package gocronlock runs the jobs of go-co-op/gocron v2 schedulers, one per instance, once per
// interval across all of them, with pglock's table locks or its leader election.
//
// gocron asks its distributed Locker for the job's lock before each run and unlocks it when the
// run returns; the adapters that release at that moment let an instance whose clock or start
// offset differs run the same interval again (gocron#841). A Locker here holds each run's lock
// with a heartbeat, and its Unlock keeps it until the run has held it for a minimum time, by
// the database's clock ([tablelock.Lock.ReleaseAfter]): a little under the job's interval, given
// with Every, or the Locker's own. A lock lost while its job runs is told to Options.OnLost;
// gocron cannot stop a running job, so that is where to stop it, and its writes are fenced by
// the lock's token as any holder's are. Shut the scheduler down before closing the
// [tablelock.Locker]: closing it releases a running job's lock at once, without the hold.
//
// An Elector lets only the leader of a leader election run jobs: IsLeader answers from the
// election's local state, true only while its lease is valid by the monotonic clock less its
// safety margin, and the term fences the leader's writes (Leader().Fence).
package gocronlock
