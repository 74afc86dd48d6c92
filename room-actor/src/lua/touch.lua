-- Rewrites a game's last-seq counter with its own value: a write that changes nothing
-- but is replicated like any other, so a WAIT after it covers every earlier write of the
-- key's master (the log read just before it).
--   KEYS[1] the last-seq counter. Returns its value (nil: no entry yet, nothing written).
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
end
return v
