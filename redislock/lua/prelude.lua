-- Shared by the scripts that read a name's queue: Redis's clock, the waiters whose place has
-- lapsed (their process stopped renewing it) taken out of the queue, and the first one woken.
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

-- Wakes the first waiter still keeping its place, if any: its id on the channel.
local function wake_first(queue, alive, channel)
  drop_lapsed(queue, alive, now_ms())
  local first = redis.call('ZRANGE', queue, 0, 0)[1]
  if first then
    redis.call('PUBLISH', channel, first)
  end
end

