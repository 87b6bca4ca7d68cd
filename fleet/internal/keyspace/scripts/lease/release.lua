-- release: give the lease up before any of the job's data was sent, counting a failure when there
-- was one. A reservation is withdrawn (its holder knows nothing entered a sandbox); a job whose
-- sandbox was associated cannot be released, since its payload may be on the way.
-- Only the live lease's holder may release. Once the lease ran out, a record at the holder's
-- generation does not prove that no claim followed: a failover can lose a later claim, and that
-- claim's settlement with it, so a withdrawal then could re-open a settled job. The record stays
-- in doubt instead, and the next claim reads the job's settlement and its dispatch marker.
-- KEYS: record, lease. ARGV: gen, owner, failed (0 or 1). Returns the failure count.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
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
