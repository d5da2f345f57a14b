-- Rate limits (package ratelimit). sqlc cannot see the columns of what a function returns, so
-- they are named and cast here.

-- TakeRate commits asynchronously unless @synchronous (set here, in the caller's transaction,
-- not in the function: the contract leaves the choice to each caller). A decision lost in a
-- crash costs at most the last few hundred milliseconds of a limit (wal_writer_delay, three
-- times over), which a rate limit can spare; waiting for the flush costs every decision.
-- name: TakeRate :one
SELECT t.allowed::boolean AS allowed, t.wait_us::bigint AS wait_us, t.remaining::integer AS remaining,
       set_config('synchronous_commit',
                  CASE WHEN @synchronous::boolean THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true) AS synchronous_commit
  FROM pglock_rate_take(@durable, @rate_key, @interval_us, @burst, @cost, @max_wait_us) AS t;

-- TakeRates is TakeRate for several keys, all or none (pglock_rate_take_many).
-- name: TakeRates :one
SELECT t.allowed::boolean AS allowed, t.wait_us::bigint AS wait_us, t.remaining::integer AS remaining,
       set_config('synchronous_commit',
                  CASE WHEN @synchronous::boolean THEN current_setting('synchronous_commit') ELSE 'off' END,
                  true) AS synchronous_commit
  FROM pglock_rate_take_many(@durable, @rate_keys::varchar[], @interval_us::bigint[], @bursts::integer[], @costs::integer[],
                             @max_wait_us) AS t;

-- RefundRate gives events back (pglock_rate_refund): how many fit now.
-- name: RefundRate :one
SELECT pglock_rate_refund(@durable, @rate_key, @interval_us, @burst, @cost)::integer AS remaining;

-- PeekRate reads how many events fit now, and how long until one does (pglock_rate_peek).
-- name: PeekRate :one
SELECT p.remaining::integer AS remaining, p.wait_us::bigint AS wait_us
  FROM pglock_rate_peek(@durable, @rate_key, @interval_us, @burst) AS p;

-- ResetRate forgets a key (pglock_rate_reset).
-- name: ResetRate :one
SELECT pglock_rate_reset(@durable, @rate_key)::boolean AS known;

-- ListRateLimits lists the keys with their next free time (tat: a key whose tat has passed is
-- as fresh as a new one), in (durable, key) order after a key (keyset pagination), those
-- containing @key_like's match when given.
-- name: ListRateLimits :many
SELECT r.durable, r.rate_key, r.tat, clock_timestamp()::timestamptz AS now
  FROM pglock_rate_limits r
 WHERE (sqlc.narg('key_like')::text IS NULL OR r.rate_key LIKE sqlc.narg('key_like'))
   AND (sqlc.narg('after_key')::varchar IS NULL OR (r.durable, r.rate_key) > (sqlc.narg('after_durable')::boolean, sqlc.narg('after_key')))
 ORDER BY r.durable, r.rate_key
 LIMIT @max_rows;
