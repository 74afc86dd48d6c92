-- Appends a batch of entries, each to its own game's log and each checked on its own
-- exactly as append.lua checks one (group commit: one round trip for many rooms):
--   KEYS[3i-2], KEYS[3i-1], KEYS[3i]: entry i's log stream, last-seq counter, room lease
--   ARGV[3i-2], ARGV[3i-1], ARGV[3i]: entry i's seq, bincode entry, writer's lease token
--   ('' = no fencing).
-- Returns one reply per entry, in order: its seq once stored, or the word why not:
-- 'FENCED' (the lease belongs to someone else), 'CONFLICT <last>' (seq ~= last + 1) or
-- 'ERROR <message>' (its XADD failed: nothing of it was stored).
-- A refused entry changes nothing and does not stop the others. Every entry of one
-- room's batch names that room's keys only (a single Redis: no slot rules apply).
--
-- Cost: one MGET reads every lease and last seq of the batch, one XADD per stored entry,
-- one MSET writes the new last seqs (three commands per batch and one per entry, instead
-- of three per entry). No XADD can stop the script half way (pcall), so the MSET always
-- runs after the XADDs it records: a stream and its counter never disagree.
local n = #KEYS / 3
local reads = {}
for i = 1, n do
  reads[2 * i - 1] = KEYS[3 * i]
  reads[2 * i] = KEYS[3 * i - 1]
end
local got = redis.call('MGET', unpack(reads))
-- Last seq per counter as this batch leaves it (a game twice in one batch sees its own).
local last = {}
local order = {}
local out = {}
for i = 1, n do
  local k = 3 * i - 2
  local counter = KEYS[k + 1]
  local token = ARGV[k + 2]
  if token ~= '' and got[2 * i - 1] ~= token then
    out[i] = 'FENCED'
  else
    local prev = last[counter] or tonumber(got[2 * i] or '0')
    if tonumber(ARGV[k]) ~= prev + 1 then
      out[i] = 'CONFLICT ' .. prev
    else
      local added = redis.pcall('XADD', KEYS[k], '0-' .. ARGV[k], 'e', ARGV[k + 1])
      if type(added) == 'table' and added.err then
        out[i] = 'ERROR ' .. added.err
      else
        if last[counter] == nil then
          order[#order + 1] = counter
        end
        last[counter] = prev + 1
        out[i] = prev + 1
      end
    end
  end
end
if #order > 0 then
  local writes = {}
  for _, counter in ipairs(order) do
    writes[#writes + 1] = counter
    writes[#writes + 1] = last[counter]
  end
  redis.call('MSET', unpack(writes))
end
return out
