-- Takes one of a user's open-room slots, atomically across the cluster:
--   KEYS[1] the user's set of open room ids, ARGV[1] the cap, ARGV[2] the new room id
-- Returns 1 if the room is counted now, 0 if the user already has `cap` open rooms.
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('SADD', KEYS[1], ARGV[2])
return 1
