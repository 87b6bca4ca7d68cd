-- end: end a bulk run (state not empty: save it and take it off the running set) or let go of it
-- (state empty), if the caller holds it.
-- KEYS: run, hold, running. ARGV: run JSON, worker, retention_ms, state, run id. Returns 1, or 0
-- when the caller does not hold the run.
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  redis.call('SREM', KEYS[3], ARGV[5])
end
redis.call('DEL', KEYS[2])
return 1
