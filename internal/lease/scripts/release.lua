-- release: give the lease up before any of the job's data was sent, counting a failure when there
-- was one. A reservation is withdrawn (its holder knows nothing entered a sandbox); a job whose
-- sandbox was associated cannot be released, since its payload may be on the way.
-- The holder may release after its lease ran out (a Redis failover outlasted it) while no claim
-- followed: every claim raises the record's generation, so a record still at the holder's
-- generation and owner says no one else has taken the job.
-- KEYS: record, lease. ARGV: gen, owner, failed (0 or 1). Returns the failure count.
local holder = redis.call('GET', KEYS[2])
if holder ~= ARGV[1] .. ':' .. ARGV[2] then
  local rec = redis.call('HMGET', KEYS[1], 'gen', 'owner')
  if holder or rec[1] ~= ARGV[1] or rec[2] ~= ARGV[2] then
    return redis.error_reply('FENCED lease lost')
  end
end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'dispatched' or state == 'settled' then
  return redis.error_reply('FENCED state ' .. state)
end
if state == 'reserved' then
  redis.call('HSET', KEYS[1], 'state', 'claimed')
end
redis.call('DEL', KEYS[2])
if ARGV[3] == '1' then
  return redis.call('HINCRBY', KEYS[1], 'failures', 1)
end
return tonumber(redis.call('HGET', KEYS[1], 'failures')) or 0
