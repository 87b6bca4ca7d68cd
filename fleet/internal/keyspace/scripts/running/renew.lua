-- renew: move the expiry of the tokens that are still held (XX: one that expired meanwhile is not
-- brought back, its slot may be another's now). Returns how many it kept.
-- KEYS: the tenant's running set. ARGV: ttl_ms, then the tokens.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kept = 0
for i = 2, #ARGV do
  kept = kept + redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[1]), ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return kept
