-- Releases a lock for its holder, or for anyone (a force release), and wakes the first waiter.
-- KEYS: 1 lock, 2 info, 3 queue, 4 alive, 5 this holder's release mark
-- ARGV: 1 holder ('' for a force release), 2 the channel that wakes waiters, 3 the mark's life
--       in ms ('0': leave none, for what an attempt that failed gives back)
-- Returns 1 if released, 0 if the holder did not hold it (or, forced, nobody did).
local current = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and current ~= ARGV[1] then
  -- A release sent again because its answer was lost finds the mark it left.
  if redis.call('GET', KEYS[5]) == ARGV[1] then
    return 1
  end
  return 0
end
if not current then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
if ARGV[1] ~= '' and ARGV[3] ~= '0' then
  redis.call('SET', KEYS[5], ARGV[1], 'PX', ARGV[3])
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  wake_first(KEYS[3], KEYS[4], ARGV[2])
end
return 1
