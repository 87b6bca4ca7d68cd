-- clear: the holder of an in-doubt claim (unknown, record_lost) stored its attempt's dispatch
-- marker first, so no earlier attempt passed the dispatch gate and none can now: the job is back
-- to claimed and may run. KEYS: record, lease. ARGV: gen, owner.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'claimed' then
  return 1
end
if state ~= 'reserved' and state ~= 'dispatched' and state ~= 'lost' then
  return redis.error_reply('FENCED state ' .. tostring(state))
end
redis.call('HSET', KEYS[1], 'state', 'claimed')
redis.call('HDEL', KEYS[1], 'sandbox', 'payload_sha256', 'profile_digest', 'provider', 'reserved_ms')
return 1
