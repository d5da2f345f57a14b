-- Takes a waiter that gave up out of the queue; if it was first and the lock is free, wakes the
-- next.
-- KEYS: 1 lock, 2 queue, 3 alive
-- ARGV: 1 waiter, 2 the channel that wakes waiters
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if first == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  wake_first(KEYS[2], KEYS[3], ARGV[2])
end
return 1
