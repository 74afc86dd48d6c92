-- Appends a batch of entries, each to its own game's log and each checked on its own
-- (group commit: one round trip for many rooms). This is the checked append: a room's
-- first append under its lease, and an append the fast path could not place
-- (`redis/append/mod.rs` says when).
--   KEYS[2i-1], KEYS[2i]: entry i's log stream and room lease
--   ARGV[4i-3], ARGV[4i-2], ARGV[4i-1], ARGV[4i]: entry i's seq, bincode entry, the
--            writer's lease token ('' = no fencing) and its epoch (0 without a token)
-- Returns one reply per entry, in order: its seq once stored, or the word why not:
-- 'FENCED' (the lease, or a newer owner's mark in the log, belongs to someone else),
-- 'CONFLICT <last>' (seq ~= last + 1) or 'ERROR <message>' (its log cannot take it, the
-- key holds something else: nothing of it was stored). A refused entry changes nothing
-- and does not stop the others.
--
-- A log's ids are `<epoch>-<seq>`: the writer's lease epoch, then the entry's seq, so a
-- log only ever accepts entries of its newest owner (XADD refuses an id below the
-- stream's last one). A node that takes a room over first writes a fence, a mark `f` at
-- `<its epoch>-<last seq>` (`lua/fence.lua`); readers skip marks. The last seq is the top
-- id's seq, whether the top is an entry or a mark.
--
-- The top is also checked against the entry below it: an entry that does not follow the
-- one below it (Redis lost writes in a restart or failover, and an unchecked append went
-- in above the hole) is removed, and the stream's last id set back, so the log reads as
-- it did before that append and the writer is told where it really ends.
local function split(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- The log's top after repairs: its id (false if empty), epoch and last seq; or nil and
-- the error when the log cannot be read (its key holds something else).
local function settle(log)
  for _ = 1, 8 do
    local top = redis.pcall('XREVRANGE', log, '+', '-', 'COUNT', 2)
    if top.err then
      return nil, top.err
    end
    if #top == 0 then
      return false, 0, 0
    end
    local ms, seq = split(top[1][1])
    local below = top[2]
    local below_seq = 0
    if below then
      local _, s = split(below[1])
      below_seq = s
    end
    -- Marks are never removed (a fence must hold); an entry must follow what is below.
    if top[1][2][1] ~= 'e' or below_seq == seq - 1 then
      return top[1][1], ms, seq
    end
    redis.call('XDEL', log, top[1][1])
    redis.pcall('XSETID', log, below and below[1] or '0-0')
  end
  return false, 0, 0
end

local out = {}
for i = 1, #KEYS / 2 do
  local k = 2 * i - 1
  local a = 4 * i - 3
  local log, lease = KEYS[k], KEYS[k + 1]
  local seq, bytes, token, epoch = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  if token ~= '' and redis.call('GET', lease) ~= token then
    out[i] = 'FENCED'
  else
    local top, top_epoch, last = settle(log)
    if top == nil then
      out[i] = 'ERROR ' .. top_epoch
    elseif top_epoch > epoch then
      out[i] = 'FENCED'
    elseif seq ~= last + 1 then
      out[i] = 'CONFLICT ' .. last
    else
      local id = epoch .. '-' .. seq
      local added = redis.pcall('XADD', log, id, 'e', bytes)
      if type(added) == 'table' and added.err and top then
        -- The stream's last id can be ahead of its top (a repair removed an entry and
        -- could not set it back): set it back to the top, once.
        redis.pcall('XSETID', log, top)
        added = redis.pcall('XADD', log, id, 'e', bytes)
      end
      if type(added) == 'table' and added.err then
        out[i] = 'ERROR ' .. added.err
      else
        out[i] = seq
      end
    end
  end
end
return out
