-- One attempt to take a lock: SET NX PX, and its fencing token from INCR in the same script.
-- KEYS: 1 lock, 2 info, 3 token counter, 4 queue (waiters by arrival), 5 alive (waiters by the
--       end of their place); all share one hash tag, so that Redis Cluster runs it on one node
-- ARGV: 1 holder, 2 TTL in ms, 3 waiter ('' for a try), 4 a waiter's place in ms,
--       5 fair ('1': only the first waiter may take it), 6 fenced ('1': draw a token),
--       7 instance, 8 metadata (JSON)
-- Returns {1, token} once held; {0, ms until the holder's lease ends} if not.
local holder, ttl, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now, now_us = now_ms()
if ARGV[5] == '1' or waiter ~= '' then
  drop_lapsed(KEYS[4], KEYS[5], now)
end

local current = redis.call('GET', KEYS[1])
if current == holder then
  -- Taken by this very attempt, sent again because its answer was lost.
  local token = 0
  if ARGV[6] == '1' then
    token = redis.call('HGET', KEYS[2], 'token')
    if not token then
      return redis.error_reply('pglock: the lock is held but its token is gone (evicted?)')
    end
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(token)}
end

local turn = not current
if turn and ARGV[5] == '1' then
  local first = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
  turn = first == nil or first == waiter
end
if turn and redis.call('SET', KEYS[1], holder, 'NX', 'PX', ttl) then
  local token = 0
  if ARGV[6] == '1' then
    -- Who holds it, for Holder; a Redlock lock has no token and no Holder.
    token = redis.call('INCR', KEYS[3])
    redis.call('HSET', KEYS[2], 'token', token, 'instance', ARGV[7], 'metadata', ARGV[8], 'acquired_ms', now)
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
  if waiter ~= '' then
    redis.call('ZREM', KEYS[4], waiter)
    redis.call('ZREM', KEYS[5], waiter)
  end
  return {1, token}
end

if waiter ~= '' then
  -- Queue the waiter (its first arrival stands) and keep its place for a while; the queue
  -- itself lapses once nobody keeps a place in it.
  local place = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[4], 'NX', now_us, waiter)
  redis.call('ZADD', KEYS[5], now + place, waiter)
  for i = 4, 5 do
    if redis.call('PTTL', KEYS[i]) < place then
      redis.call('PEXPIRE', KEYS[i], place)
    end
  end
end
return {0, redis.call('PTTL', KEYS[1])}
