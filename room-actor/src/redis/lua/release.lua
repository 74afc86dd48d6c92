-- Releases a lease only if it is still held with this token (a drained room's handover):
--   KEYS[1] the lease, ARGV[1] the token. Returns 1 if released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
