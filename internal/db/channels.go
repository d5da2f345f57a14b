package db

// The channels the SQL contract notifies on.
const (
	HandoffChannel  = "pglock_handoff"  // a lock handed to a waiter: JSON with lock_name, holder_id, fencing_token, expires_at
	ReleasedChannel = "pglock_released" // the name of a lock freed with nobody waiting
	JobsChannel     = "pglock_jobs"     // the lock key of a job whose outcome has waiters (pglock_job_announce)
	CronChannel     = "pglock_cron"     // a cron schedule changed: JSON with op (trigger, backfill, pause, resume, cancel), schedule, run

	SupersededChannel = "pglock_job_superseded" // the fencing token of a job attempt a newer delivery superseded
	DebounceChannel   = "pglock_job_debounce"   // the scope of a debounced key whose pending cycle began
)
