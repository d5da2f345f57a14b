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
