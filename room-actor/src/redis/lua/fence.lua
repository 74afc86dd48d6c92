-- Fences a game's log for a node that has just taken the room's lease, before it reads
-- the log: a mark `f` at `<epoch>-<last seq>` above everything in it, so no entry of an
-- older owner can go in after it (XADD refuses an id below the stream's last id), even
-- one sent unchecked on that owner's fast path (`lua/append_checked.lua`).
--   KEYS[1] the room's lease, KEYS[2] the game's log
--   ARGV[1] the new owner's token, ARGV[2] its epoch
-- Returns 'OK', or 'FENCED' when the lease is no longer the caller's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 'FENCED'
end
local epoch = tonumber(ARGV[2])
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local top_epoch, last = 0, 0
if #top > 0 then
  local ms, seq = string.match(top[1][1], '^(%d+)-(%d+)$')
  top_epoch, last = tonumber(ms), tonumber(seq)
end
if top_epoch >= epoch then
  return 'OK'
end
redis.call('XADD', KEYS[2], epoch .. '-' .. last, 'f', ARGV[1])
return 'OK'
