-- Opens one of a user's sockets on this node if the user's sockets on the live nodes stay
-- within the cap, atomically across the cluster:
--   KEYS[1] the user's hash of open sockets (field: node id, value: its count there)
--   ARGV[1] this node's id, ARGV[2] the cap, ARGV[3] the hash's TTL (ms),
--   ARGV[4..] the other live nodes' ids (fields of other nodes are dead nodes' leftovers:
--   not counted, so a node that died with a user's sockets never locks the user out)
-- Returns 1 if the socket is counted now, 0 if the user already has `cap` open sockets.
local fields = { ARGV[1] }
for i = 4, #ARGV do
  if ARGV[i] ~= ARGV[1] then
    fields[#fields + 1] = ARGV[i]
  end
end
local open = 0
for _, n in ipairs(redis.call('HMGET', KEYS[1], unpack(fields))) do
  open = open + math.max(tonumber(n) or 0, 0)
end
if open >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
