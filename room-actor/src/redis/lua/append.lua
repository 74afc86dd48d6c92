-- Appends one entry to a game's log, atomically:
--   KEYS[1] log stream, KEYS[2] last-seq counter, KEYS[3] the room's lease
--   ARGV[1] the entry's seq, ARGV[2] the bincode entry, ARGV[3] the writer's lease token
--   ('' = no fencing, for a store used without leases).
-- Error replies start with their code word (Redis prefixes ERR to a bare word).
-- Refuses with FENCED when the lease belongs to someone else (a node that lost its lease
-- can never append again), and with CONFLICT <last> unless seq = last + 1.
-- One read for the lease and the last seq (false where a key is missing).
local got = redis.call('MGET', KEYS[3], KEYS[2])
if ARGV[3] ~= '' and got[1] ~= ARGV[3] then
  return redis.error_reply('FENCED the room lease belongs to another node')
end
local last = tonumber(got[2] or '0')
if tonumber(ARGV[1]) ~= last + 1 then
  return redis.error_reply('CONFLICT ' .. last)
end
redis.call('XADD', KEYS[1], '0-' .. ARGV[1], 'e', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
return last + 1
