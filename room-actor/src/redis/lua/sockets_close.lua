-- Closes one of a user's sockets on this node:
--   KEYS[1] the user's hash of open sockets, ARGV[1] this node's id, ARGV[2] the TTL (ms)
-- Never below zero (the hash may have expired or been zeroed by a restart meanwhile); the
-- field goes at zero, and the hash with its last field. Returns this node's count left.
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return left
