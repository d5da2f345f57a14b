package ops

// Grant is what a role needs to use one part of pglock: EXECUTE on Functions (signatures as
// to_regprocedure reads them) and SELECT on Tables. Grants is docs/sql.md's least-privilege
// grants, part by part (TestGrantsAreTheDocumentedOnes holds the two to each other).
type Grant struct {
	Part      string
	Functions []string
	Tables    []string
}

// Grants are the parts an application role (the first five) and an operator's role (the last)
// may be granted.
var Grants = []Grant{
	{Part: "table locks and advisory names", Tables: []string{"distributed_locks", "distributed_lock_waiters"}, Functions: []string{
		"pglock_attempt(varchar, varchar, bigint, jsonb, varchar, boolean)",
		"pglock_acquire(varchar, varchar, bigint, jsonb, varchar, boolean)",
		"pglock_release(varchar, varchar)", "verify_fence(varchar, bigint)",
		"pglock_fence(varchar, bigint, bigint)",
		"extend_lock_ms(varchar, varchar, bigint)",
		"pglock_renew_many(varchar[], varchar[], bigint[])", "pglock_wait_many(varchar[], varchar[], bigint[])",
		"pglock_release_after(varchar, varchar, bigint)",
		"acquire_lock_ms(varchar, varchar, bigint, jsonb)", "release_lock(varchar, varchar)",
		"acquire_lock(varchar, varchar, integer, jsonb)", "extend_lock(varchar, varchar, integer)",
		"register_advisory_name(text, text)",
	}},
	{Part: "jobs", Tables: []string{"pglock_jobs"}, Functions: []string{
		"pglock_job_claim_in_mode(varchar, text, varchar, varchar, boolean, bigint, text, bigint, integer, bigint, text, bigint)",
		"pglock_job_fence(varchar, text, bigint, bigint)",
		"pglock_job_renew(varchar, text, bigint, bigint)",
		"pglock_job_renew_many(varchar[], text[], bigint[], bigint[])",
		"pglock_job_finish(varchar, text, bigint, boolean, jsonb, text, bigint)",
		"pglock_job_finish_tx(varchar, text, bigint, bigint)",
		"pglock_job_claim_many(varchar, text[], varchar, varchar, bigint, integer, bigint)",
		"pglock_job_finish_many(varchar, text[], bigint[], bigint)",
		"pglock_job_await(varchar, text, varchar, bigint)", "pglock_job_unawait(varchar, text, varchar)",
		"pglock_job_running(varchar, text)",
		"pglock_job_forget(varchar, text)", "pglock_job_collect(integer)",
		"pglock_job_debounce(varchar, text, jsonb, bigint, bigint)",
		"pglock_job_debounce_claim(varchar, varchar, bigint, integer)", "pglock_job_debounce_next(varchar)",
		"pglock_job_debounce_renew_many(varchar[], text[], bigint[], bigint[])",
		"pglock_job_debounce_finish(varchar, text, bigint)", "pglock_job_debounce_fail(varchar, text, bigint, text, bigint)",
	}},
	{Part: "ratelimit", Functions: []string{
		"pglock_rate_take(boolean, varchar, bigint, integer, integer, bigint)",
		"pglock_rate_take_many(boolean, varchar[], bigint[], integer[], integer[], bigint)",
		"pglock_rate_refund(boolean, varchar, bigint, integer, integer)",
		"pglock_rate_peek(boolean, varchar, bigint, integer)", "pglock_rate_reset(boolean, varchar)",
	}},
	{Part: "semaphores", Functions: []string{
		"pglock_semaphore_attempt(varchar, varchar, integer, bigint, jsonb, varchar, boolean)",
		"pglock_semaphore_take(varchar, varchar, integer, integer, varchar, integer, bigint, jsonb, varchar, boolean)",
		"pglock_take_all(varchar, varchar[], integer[], integer[], varchar[], integer[], bigint, jsonb, varchar, boolean)",
	}},
	{Part: "cron scheduler", Tables: []string{"pglock_cron_schedules", "pglock_cron_runs"}, Functions: []string{
		"pglock_cron_register_extras(varchar, text, text, text, text, bigint, bigint, integer, varchar, bigint, timestamptz, timestamptz, integer, integer)",
		"pglock_cron_seen_clock(varchar[], varchar, bigint, bigint)",
		"pglock_cron_claim_reporting(varchar, varchar[], timestamptz[], timestamptz[], bigint[], bigint[], varchar[], timestamptz[], text[], timestamptz[], bigint[], boolean)",
		"pglock_cron_renew(bigint, bigint, bigint)", "pglock_cron_renew_many(bigint[], bigint[], bigint[])",
		"pglock_cron_finish(bigint, bigint, text, text)",
		"pglock_cron_collect()",
	}},
	{Part: "cron controls (an operator's)", Tables: []string{"pglock_cron_schedules", "pglock_cron_runs", "pglock_instances", "pglock_cron_changes"}, Functions: []string{
		"pglock_cron_pause(varchar, text, text)", "pglock_cron_resume(varchar)",
		"pglock_cron_trigger(varchar, text)", "pglock_cron_backfill(varchar, timestamptz[], text)",
		"pglock_cron_define(varchar, varchar, text, text, jsonb, text, text, bigint, bigint, integer, bigint, bigint, bigint, timestamptz, timestamptz, integer, integer, boolean, text, text)",
		"pglock_cron_delete(varchar, text, text)",
		"pglock_cron_collect()",
	}},
}
