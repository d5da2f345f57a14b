-- Renews a lock for its holder.
-- KEYS: 1 lock, 2 info
-- ARGV: 1 holder, 2 TTL in ms
-- Returns 1 if renewed, 0 if the lock is gone, -1 if another holder has it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
if not current then
  return 0
end
return -1
