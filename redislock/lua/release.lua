-- Releases a lock for its holder, or for anyone (a force release), and wakes the first waiter.
-- KEYS: 1 lock, 2 info, 3 queue, 4 alive
-- ARGV: 1 holder ('' for a force release), 2 the channel that wakes waiters
-- Returns 1 if released, 0 if the holder did not hold it (or, forced, nobody did).
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('DEL', KEYS[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
drop_lapsed(KEYS[3], KEYS[4], now_ms())
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if first then
  redis.call('PUBLISH', ARGV[2], first)
end
return 1
