-- reserve: record, before any of the job's data is sent, that it is about to be dispatched.
-- KEYS: record, lease. ARGV: gen, owner, payload_sha256, profile_digest, provider.
-- Idempotent for its holder, so that a reply lost in transit can be asked again.
if redis.call('GET', KEYS[2]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return redis.error_reply('FENCED lease lost')
end
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'reserved' then
  return 1
end
if state ~= 'claimed' then
  return redis.error_reply('FENCED state ' .. tostring(state))
end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'state', 'reserved', 'payload_sha256', ARGV[3], 'profile_digest', ARGV[4],
  'provider', ARGV[5], 'reserved_ms', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
return 1
