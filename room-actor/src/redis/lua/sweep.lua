-- Drops the side entries (draining flag, peer link address, reported stats) of node ids
-- that are no longer in the nodes set: the heartbeat trims ids whose beat expired long ago
-- from the set, but a node that was never found dead (every node died at once) would keep
-- its side entries forever, and the detection poll reads those hashes whole ten times a
-- second.
--   KEYS[1] the nodes sorted set; KEYS[2..] the side hashes, keyed by node id
-- Returns how many entries were dropped.
local dropped = 0
for i = 2, #KEYS do
  for _, node in ipairs(redis.call('HKEYS', KEYS[i])) do
    if not redis.call('ZSCORE', KEYS[1], node) then
      redis.call('HDEL', KEYS[i], node)
      dropped = dropped + 1
    end
  end
end
return dropped
