-- Renews a batch of leases held by one node:
--   KEYS[i] a lease, ARGV[1] the TTL (ms), ARGV[i + 1] the token expected in KEYS[i]
-- Returns, per lease, 1 if it was still ours and is renewed, 0 if it is lost.
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
