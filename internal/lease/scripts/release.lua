-- release: give the lease up before dispatch, counting a failure when there was one.
-- KEYS: record, lease. ARGV: gen, owner, failed (0 or 1). Returns the failure count.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
end
redis.call('DEL', KEYS[2])
if ARGV[3] == '1' then
  return redis.call('HINCRBY', KEYS[1], 'failures', 1)
end
return tonumber(redis.call('HGET', KEYS[1], 'failures')) or 0
