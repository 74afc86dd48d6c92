-- Removes a node found dead from the membership, unless it has sent a heartbeat since
-- it was found dead (its score moved): then it is alive after all and stays.
--   KEYS[1] the nodes sorted set, KEYS[2] the draining flags hash, KEYS[3] the nodes'
--   peer link addresses
--   ARGV[1] the node id, ARGV[2] its score (heartbeat expiry, ms) when it was found dead
-- Returns 1 if removed, 0 if it stays (or was already gone).
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return 1
end
return 0
