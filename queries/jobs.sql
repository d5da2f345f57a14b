-- Job deduplication (package jobs). sqlc cannot see the columns of what a function returns, so
-- they are named and cast here.

-- ClaimJob claims outside a transaction, under a lease (Run). A duplicate of a key that
-- succeeded is answered by the claim too, not by a plain read of its row first: a prepared
-- statement's plan is the session's to keep, and one made while the table was small scans it
-- whole however large it grows, until it is analysed again; pglock_job_claim's is kept on the
-- primary key (migrations/functions/30_jobs.sql). The first branch, which the planner drops,
-- only names the columns for sqlc (the LEFT JOIN tells it they may be NULL, as the claim's may).
-- name: ClaimJob :one
(SELECT 'done'::text AS outcome, j.status, j.holder_id, j.instance, j.attempts, j.fencing_token,
        j.lease_expires_at, j.started_at, j.finished_at, j.last_error, j.result, j.fingerprint,
        j.retain_until, j.created_at, NULL::bigint AS lock_key
   FROM (SELECT 1) AS one
   LEFT JOIN pglock_jobs j ON false
  WHERE false)
UNION ALL
SELECT a.*
  FROM pglock_job_claim_in_mode(@scope, @job_key, @holder_id, @instance, false, @ttl_ms, sqlc.narg('fingerprint')::text,
                                @window_ms, @max_attempts, 0, @mode, sqlc.narg('period_ms')::bigint) AS a;

-- ClaimJobTx claims inside RunTx's transaction. With finish, a claim that runs the key also
-- writes its outcome, succeeded, in the same statement (finished_at is then its time), for
-- RunTxSQL: database/sql sends COMMIT on its own, so the outcome goes in before fn runs, and
-- commits or rolls back with fn's writes all the same. The first branch names the columns, as
-- ClaimJob's does.
-- name: ClaimJobTx :one
(SELECT 'done'::text AS outcome, j.status, j.holder_id, j.instance, j.attempts, j.fencing_token,
        j.lease_expires_at, j.started_at, j.finished_at, j.last_error, j.result, j.fingerprint,
        j.retain_until, j.created_at, NULL::bigint AS lock_key
   FROM (SELECT 1) AS one
   LEFT JOIN pglock_jobs j ON false
  WHERE false)
UNION ALL
SELECT a.outcome, a.status, a.holder_id, a.instance, a.attempts, a.fencing_token, a.lease_expires_at, a.started_at,
       CASE WHEN @finish::boolean AND a.outcome = 'claimed'
            THEN pglock_job_require_claim(pglock_job_finish_tx(@scope, @job_key, a.fencing_token, @window_ms), @scope, @job_key)
            ELSE a.finished_at END,
       a.last_error, a.result, a.fingerprint, a.retain_until, a.created_at, a.lock_key
  FROM pglock_job_claim_in_mode(@scope, @job_key, @holder_id, @instance, true, NULL, sqlc.narg('fingerprint')::text,
                                @window_ms, @max_attempts, @idle_timeout_ms, @mode, sqlc.narg('period_ms')::bigint) AS a;

-- ClaimJobsTx claims many keys inside RunTxBatch's transaction (pglock_job_claim_many): a row
-- per key, in the order given. The first branch names the columns, as ClaimJob's does.
-- name: ClaimJobsTx :many
(SELECT 'done'::text AS outcome, j.status, j.holder_id, j.instance, j.attempts, j.fencing_token,
        j.lease_expires_at, j.started_at, j.finished_at, j.last_error, j.result, j.fingerprint,
        j.retain_until, j.created_at, NULL::bigint AS lock_key
   FROM (SELECT 1) AS one
   LEFT JOIN pglock_jobs j ON false
  WHERE false)
UNION ALL
SELECT a.*
  FROM pglock_job_claim_many(@scope, @job_keys::text[], @holder_id, @instance, @window_ms, @max_attempts,
                             @idle_timeout_ms) AS a;

-- FinishJobsTx finishes the claims of ClaimJobsTx just before COMMIT, which goes in the same
-- round trip: without every claim, the error keeps the COMMIT from running.
-- name: FinishJobsTx :one
SELECT pglock_job_require_claim(pglock_job_finish_many(@scope, @job_keys::text[], @fencing_tokens::bigint[], @window_ms),
                                @scope, 'a batch of ' || cardinality(@job_keys::text[]))::timestamptz AS finished_at;

-- RenewJobs renews the leases of many attempts in one statement (pglock_job_renew_many): a row
-- per attempt, in the order given, with its outcome
-- ('renewed', 'busy' or 'gone').
-- name: RenewJobs :many
SELECT r.outcome::text                               AS outcome,
       coalesce(r.lease_expires_at, 'epoch')::timestamptz AS expires_at
  FROM pglock_job_renew_many(@scopes::varchar[], @job_keys::text[], @fencing_tokens::bigint[], @ttl_ms::bigint[]) AS r;

-- WatchJob tells deliveries waiting for a key whether it still runs (pglock_job_running).
-- name: WatchJob :one
SELECT coalesce(r.running, false)::boolean     AS running,
       coalesce(r.lease_left_ms, 0)::bigint   AS lease_left_ms
  FROM pglock_job_running(@scope, @job_key) AS r;

-- FinishJob returns no row (pgx.ErrNoRows) when the attempt's outcome was refused.
-- FenceJob verifies, and keeps until the transaction ends, that the job attempt with the token
-- still runs, and bounds the transaction (pglock_job_fence): the lease's expiry, or no row
-- (pgx.ErrNoRows) when it no longer runs.
-- name: FenceJob :one
SELECT f.expires_at::timestamptz AS expires_at
  FROM pglock_job_fence(@scope, @job_key, @fencing_token, @grace_ms) AS f(expires_at)
 WHERE f.expires_at IS NOT NULL;

-- name: FinishJob :one
SELECT f.finished_at::timestamptz AS finished_at
  FROM pglock_job_finish(@scope, @job_key, @fencing_token, @succeeded,
                         sqlc.narg('result')::jsonb, sqlc.narg('error')::text, @window_ms) AS f(finished_at)
 WHERE f.finished_at IS NOT NULL;

-- FinishJobTx goes just before the COMMIT of a RunTx transaction (pipelined with it). When the
-- transaction holds no such claim it fails (SQLSTATE P0002), so that the COMMIT does not run.
-- name: FinishJobTx :one
SELECT pglock_job_require_claim(pglock_job_finish_tx(@scope, @job_key, @fencing_token, @window_ms),
                                @scope, @job_key)::timestamptz AS finished_at;

-- RecordJobOutcome records the outcome of a RunTx attempt whose transaction did not record it:
-- failed, after it rolled back; succeeded, when fn committed it itself. A claim outside a
-- transaction, finished at once, in one autocommit statement. No row (pgx.ErrNoRows) when the
-- key could not be claimed (another delivery claimed it meanwhile, and its outcome is the one
-- that counts).
-- name: RecordJobOutcome :one
SELECT pglock_job_finish(@scope, @job_key, c.fencing_token, @succeeded, NULL, sqlc.narg('error')::text, @window_ms)::timestamptz AS finished_at
  FROM pglock_job_claim_in_mode(@scope, @job_key, @holder_id, @instance, false, @ttl_ms, sqlc.narg('fingerprint')::text,
                                @window_ms, @max_attempts, 0, @mode, sqlc.narg('period_ms')::bigint) AS c
 WHERE c.outcome = 'claimed';

-- name: AwaitJob :one
SELECT pglock_job_await(@scope, @job_key, @waiter_id, @ttl_ms)::bigint AS lock_key;

-- name: UnawaitJob :exec
SELECT pglock_job_unawait(@scope, @job_key, @waiter_id);

-- ForgetJob returns the forgotten record's status, or no row (pgx.ErrNoRows) when there was none.
-- name: ForgetJob :one
SELECT f.status::text AS status
  FROM pglock_job_forget(@scope, @job_key) AS f(status)
 WHERE f.status IS NOT NULL;

-- name: CollectJobs :one
SELECT pglock_job_collect(@batch)::integer AS deleted;

-- name: GetJob :one
SELECT sqlc.embed(j), clock_timestamp()::timestamptz AS now
  FROM pglock_jobs j
 WHERE j.scope = @scope AND j.job_key = @job_key;

-- ListJobs lists records in key order, with a status, a scope, keys LIKE a pattern, or all;
-- after a (scope, key), when given: a page of a keyset pagination, on the primary key.
-- name: ListJobs :many
SELECT sqlc.embed(j), clock_timestamp()::timestamptz AS now
  FROM pglock_jobs j
 WHERE (sqlc.narg('status')::text IS NULL OR j.status = sqlc.narg('status'))
   AND (sqlc.narg('scope')::varchar IS NULL OR j.scope = sqlc.narg('scope'))
   AND (sqlc.narg('key_like')::text IS NULL OR j.job_key LIKE sqlc.narg('key_like'))
   AND (sqlc.narg('after_scope')::varchar IS NULL OR (j.scope, j.job_key) > (sqlc.narg('after_scope'), sqlc.narg('after_key')::text))
 ORDER BY j.scope, j.job_key
 LIMIT @max_rows;

-- Debounce delivers a key debounced (pglock_job_debounce).
-- name: Debounce :one
SELECT d.due_at::timestamptz AS due_at, d.deliveries::integer AS deliveries, d.running::boolean AS running
  FROM pglock_job_debounce(@scope, @job_key, @payload::jsonb, @quiet_ms, @max_wait_ms) AS d;

-- ClaimDebounced claims the ready keys of a scope (pglock_job_debounce_claim).
-- name: ClaimDebounced :many
SELECT c.job_key::text AS job_key, c.payload::jsonb AS payload, c.deliveries::integer AS deliveries,
       c.first_at::timestamptz AS first_at, c.fencing_token::bigint AS fencing_token, c.attempts::integer AS attempts,
       c.started_at::timestamptz AS started_at, c.lease_expires_at::timestamptz AS lease_expires_at
  FROM pglock_job_debounce_claim(@scope, @instance, @ttl_ms, @max_keys) AS c;

-- NextDebounced is how long a scope's runners may sleep (pglock_job_debounce_next), -1 for
-- until a delivery announces a new pending cycle.
-- name: NextDebounced :one
SELECT coalesce(pglock_job_debounce_next(@scope), -1)::bigint AS sleep_ms;

-- RenewDebounced renews the leases of debounced runs (pglock_job_debounce_renew_many).
-- name: RenewDebounced :many
SELECT r.outcome::text AS outcome, coalesce(r.lease_expires_at, 'epoch')::timestamptz AS expires_at
  FROM pglock_job_debounce_renew_many(@scopes::varchar[], @job_keys::text[], @fencing_tokens::bigint[], @ttl_ms::bigint[]) AS r;

-- FinishDebounced ends a debounced run in its transaction, just before COMMIT: no row
-- (pgx.ErrNoRows) when the run is no longer the token's.
-- name: FinishDebounced :one
SELECT f.finished_at::timestamptz AS finished_at
  FROM pglock_job_debounce_finish(@scope, @job_key, @fencing_token) AS f(finished_at)
 WHERE f.finished_at IS NOT NULL;

-- FailDebounced records a debounced run's failure; no row when the run is no longer the token's.
-- name: FailDebounced :one
SELECT f.retry_at::timestamptz AS retry_at
  FROM pglock_job_debounce_fail(@scope, @job_key, @fencing_token, @error, @retry_ms) AS f(retry_at)
 WHERE f.retry_at IS NOT NULL;

-- ListDebounced lists a scope's debounced keys, or every scope's, the earliest ready first.
-- name: ListDebounced :many
SELECT sqlc.embed(d), clock_timestamp()::timestamptz AS now
  FROM pglock_job_debounces d
 WHERE sqlc.narg('scope')::varchar IS NULL OR d.scope = sqlc.narg('scope')
 ORDER BY d.ready_at NULLS LAST, d.scope, d.job_key
 LIMIT @max_rows;

-- SupersedeTx asks the runner of a RunTx attempt holding a key (its lock key) to stop, for a
-- Supersede delivery of the key whose claim drew the token (see pglock_job_claim_in_mode).
-- name: SupersedeTx :exec
SELECT pg_notify('pglock_job_superseded', 'lock:' || @lock_key::bigint || ':' || @token::bigint);
