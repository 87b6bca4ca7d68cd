-- hold: save a bulk run's progress and position and renew its hold, if the caller holds it.
-- KEYS: run, pos, hold, stop. ARGV: run JSON, pos JSON, worker, hold_ttl_ms, retention_ms.
-- Returns -1 when another worker holds the run (or none), else whether a stop was asked (0 or 1).
if redis.call('GET', KEYS[3]) ~= ARGV[3] then return -1 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[5])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[5])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return redis.call('EXISTS', KEYS[4])
