-- acquire: drop a tenant's expired slots, then add up to n tokens while fewer than limit are held,
-- and return how many it added. The clock is the server's: workers' clocks may differ.
-- KEYS: the tenant's running set. ARGV: ttl_ms, limit, n, then the n tokens.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local n = math.min(free, tonumber(ARGV[3]))
if n <= 0 then return 0 end
for i = 1, n do
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[3 + i])
end
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
return n
