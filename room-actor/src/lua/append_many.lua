-- Appends a batch of entries, each to its own game's log and each checked on its own
-- exactly as append.lua checks one (group commit: one round trip for many rooms):
--   KEYS[3i-2], KEYS[3i-1], KEYS[3i]: entry i's log stream, last-seq counter, room lease
--   ARGV[3i-2], ARGV[3i-1], ARGV[3i]: entry i's seq, bincode entry, writer's lease token
--   ('' = no fencing).
-- Returns one reply per entry, in order: its seq once stored, or the word why not:
-- 'FENCED' (the lease belongs to someone else), 'CONFLICT <last>' (seq ~= last + 1) or
-- 'ERROR <message>' (its XADD failed: nothing of it was stored).
-- A refused entry changes nothing and does not stop the others (XADD runs under pcall;
-- its counter is written only after it succeeded). Every entry of one room's batch names
-- that room's keys only (a single Redis: no slot rules apply).
--
-- Per entry this is three commands; one MGET for the whole batch and one MSET at the end
-- measured costlier, not cheaper (callgrind of redis-server: 71,500 against 56,600
-- instructions per entry in batches of one, 46,500 against 43,100 in batches of four;
-- benches/README.md, issue 15): Redis's Lua pays more for the tables and unpack than for
-- the calls they save.
local out = {}
for i = 1, #KEYS / 3 do
  local k = 3 * i - 2
  local token = ARGV[k + 2]
  -- One read for the lease and the last seq (false where a key is missing).
  local got = redis.call('MGET', KEYS[k + 2], KEYS[k + 1])
  if token ~= '' and got[1] ~= token then
    out[i] = 'FENCED'
  else
    local last = tonumber(got[2] or '0')
    if tonumber(ARGV[k]) ~= last + 1 then
      out[i] = 'CONFLICT ' .. last
    else
      local added = redis.pcall('XADD', KEYS[k], '0-' .. ARGV[k], 'e', ARGV[k + 1])
      if type(added) == 'table' and added.err then
        out[i] = 'ERROR ' .. added.err
      else
        redis.call('SET', KEYS[k + 1], ARGV[k])
        out[i] = last + 1
      end
    end
  end
end
return out
