-- Takes a lease from a known holder, fencing it: a restarted node taking back what its
-- previous incarnation held (same node id), or a node taking a dead node's rooms.
--   KEYS[1] the lease, KEYS[2] the room's epoch counter
--   ARGV[1] the holder's token the caller saw, ARGV[2] the taking node id, ARGV[3] the TTL (ms)
-- Returns the new owner token `node/epoch` (a higher epoch: anything the old holder still
-- sends is fenced), or nil when the lease is not held with that token any more (someone
-- else took it, or it lapsed: then `claim` is the way).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
local epoch = redis.call('INCR', KEYS[2])
local token = ARGV[2] .. '/' .. epoch
redis.call('SET', KEYS[1], token, 'PX', ARGV[3])
return token
