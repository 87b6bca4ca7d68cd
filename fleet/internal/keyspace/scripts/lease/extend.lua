-- extend: renew the lease, only for its current holder.
-- KEYS: record, lease. ARGV: gen, owner, ttl_ms, record_ttl_ms. Returns 1, or 0 when lost.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
