-- Shared by the scripts that read a name's queue: Redis's clock, and the waiters whose place has
-- lapsed (their process stopped renewing it) taken out of the queue.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function drop_lapsed(queue, alive, now)
  local lapsed = redis.call('ZRANGEBYSCORE', alive, '-inf', now, 'LIMIT', 0, 100)
  for _, w in ipairs(lapsed) do
    redis.call('ZREM', queue, w)
    redis.call('ZREM', alive, w)
  end
end

