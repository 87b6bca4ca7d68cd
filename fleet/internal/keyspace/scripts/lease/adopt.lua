-- adopt: record a settlement that JetStream already holds, whichever attempt stored it. JetStream
-- stores one settlement per job, so the record may only move forward to it: a settled record is
-- left as it is, and the generation is never touched. The caller's own lease, if it names one,
-- ends.
-- KEYS: record, lease. ARGV: status, record_ttl_ms, gen, owner ('' when the caller holds no lease).
if redis.call('HGET', KEYS[1], 'state') ~= 'settled' then
  redis.call('HSET', KEYS[1], 'state', 'settled', 'status', ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[4] ~= '' and redis.call('GET', KEYS[2]) == ARGV[3] .. ':' .. ARGV[4] then
  redis.call('DEL', KEYS[2])
end
return 1
