-- settle: record that the job's settlement is stored in JetStream, and drop the lease if it is
-- the caller's. JetStream's store-once already decided the settlement; this records the fact so
-- that redeliveries and republished ids are acked without running.
-- KEYS: record, lease. ARGV: gen, owner, status, record_ttl_ms.
redis.call('HSET', KEYS[1], 'state', 'settled', 'status', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if redis.call('GET', KEYS[2]) == ARGV[1] .. ':' .. ARGV[2] then
  redis.call('DEL', KEYS[2])
end
return 1
