-- associate: record the sandbox a reserved job's payload is about to enter.
-- KEYS: record, lease. ARGV: gen, owner, sandbox.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
end
local rec = redis.call('HMGET', KEYS[1], 'state', 'sandbox')
if rec[1] == 'dispatched' and rec[2] == ARGV[3] then
  return 1
end
if rec[1] ~= 'reserved' then
  return redis.error_reply('FENCED state ' .. tostring(rec[1]))
end
redis.call('HSET', KEYS[1], 'state', 'dispatched', 'sandbox', ARGV[3])
return 1
