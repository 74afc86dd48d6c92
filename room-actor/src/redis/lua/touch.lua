-- Rewrites a game's last-seq counter with its own value: a write that changes nothing
-- but is replicated like any other, so a WAIT after it covers every earlier write of the
-- key's master (the log read just before it). A counter that is not there (no entry
-- yet, or a log in the epoch layout, which keeps none) is written as 0, what a missing
-- one reads as.
--   KEYS[1] the last-seq counter. Returns its value before (nil: none).
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], v or '0', 'KEEPTTL')
return v
