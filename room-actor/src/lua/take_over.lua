-- Takes a room's lease from a given holder (a node declared dead, or this node's own
-- previous process restarted with the same id), bumping the epoch so every append the
-- old holder still tries is fenced:
--   KEYS[1] the lease, KEYS[2] the room's epoch counter
--   ARGV[1] the taking node id, ARGV[2] the lease TTL (ms), ARGV[3] the holder's node id
-- Takes the lease when it is held by ARGV[3] (whatever its epoch) or by nobody; returns
-- the new owner token `node/epoch`, or nil when someone else holds it.
local current = redis.call('GET', KEYS[1])
if current then
  local holder = string.match(current, '^(.*)/%d+$')
  if holder ~= ARGV[3] then
    return false
  end
end
local epoch = redis.call('INCR', KEYS[2])
local token = ARGV[1] .. '/' .. epoch
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
