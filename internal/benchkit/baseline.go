package benchkit

// The baseline benchmarks measure pglock against: what a team writes by hand without pglock,
// the seed's upsert (its token drawn in VALUES) and a delete, sent as plain statements.
const (
	RawUpsertSQL = `INSERT INTO distributed_locks AS l (lock_name, holder_id, fencing_token, acquired_at, expires_at)
		VALUES ($1, $2, nextval('distributed_locks_fencing_token_seq'), clock_timestamp(), clock_timestamp() + interval '30 seconds')
		ON CONFLICT (lock_name) DO UPDATE
			SET holder_id = excluded.holder_id, fencing_token = excluded.fencing_token,
				acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
			WHERE l.holder_id = excluded.holder_id OR l.expires_at <= clock_timestamp()`
	RawDeleteSQL = "DELETE FROM distributed_locks WHERE lock_name = $1 AND holder_id = $2"
	PKReadSQL    = "SELECT holder_id, expires_at FROM distributed_locks WHERE lock_name = $1"
)

// The floor of a hand-written handoff queue (RawHandoffWorkers).
const (
	rawHandoffSetupSQL = `INSERT INTO distributed_locks (lock_name, holder_id, fencing_token, acquired_at, expires_at)
		VALUES ($1, $2, nextval('distributed_locks_fencing_token_seq'), clock_timestamp(), clock_timestamp() + interval '30 seconds')`
	rawHandoffSQL = `WITH place AS (DELETE FROM distributed_lock_waiters WHERE lock_name = $1 AND holder_id = $2)
		UPDATE distributed_locks
		   SET holder_id = $2, fencing_token = nextval('distributed_locks_fencing_token_seq'),
		       acquired_at = clock_timestamp(), expires_at = clock_timestamp() + interval '30 seconds'
		 WHERE lock_name = $1
		RETURNING pg_notify('pglock_raw_handoff', $2)`
	rawQueueSQL = `INSERT INTO distributed_lock_waiters (lock_name, holder_id, ttl_ms, enqueued_at, expires_at)
		SELECT $1, $2, 30000, clock_timestamp(), clock_timestamp() + interval '30 seconds'
		  FROM set_config('synchronous_commit', 'off', true)
		ON CONFLICT DO NOTHING`
)
