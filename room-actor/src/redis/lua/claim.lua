-- Claims a room's lease if nobody holds it:
--   KEYS[1] the lease, KEYS[2] the room's epoch counter
--   ARGV[1] the claiming node id, ARGV[2] the lease TTL (ms)
-- Returns the new owner token `node/epoch` (the epoch only ever grows), or nil when the
-- lease is held by someone.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local epoch = redis.call('INCR', KEYS[2])
local token = ARGV[1] .. '/' .. epoch
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
