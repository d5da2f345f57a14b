-- Counts the waiters that keep their place in a name's queue.
-- KEYS: 1 queue, 2 alive
drop_lapsed(KEYS[1], KEYS[2], now_ms())
return redis.call('ZCARD', KEYS[1])
