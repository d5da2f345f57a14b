-- Rate limits (package ratelimit). sqlc cannot see the columns of what a function returns, so
-- they are named and cast here.

-- name: TakeRate :one
SELECT t.allowed::boolean AS allowed, t.wait_us::bigint AS wait_us, t.remaining::integer AS remaining
  FROM pglock_rate_take(@durable, @rate_key, @interval_us, @burst, @cost, @max_wait_us) AS t;
