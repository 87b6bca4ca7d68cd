-- settle: record that the holder's settlement is stored in JetStream, and end its lease. Fenced
-- like every transition: only the lease's holder, of the record's generation, may settle.
-- KEYS: record, lease. ARGV: gen, owner, status, record_ttl_ms.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
end
local rec = redis.call('HMGET', KEYS[1], 'state', 'gen', 'status')
if tonumber(rec[2]) ~= tonumber(ARGV[1]) then
  return redis.error_reply('FENCED generation ' .. tostring(rec[2]))
end
if rec[1] == 'settled' and rec[3] ~= ARGV[3] then
  return redis.error_reply('FENCED settled ' .. tostring(rec[3]))
end
redis.call('HSET', KEYS[1], 'state', 'settled', 'status', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('DEL', KEYS[2])
return 1
