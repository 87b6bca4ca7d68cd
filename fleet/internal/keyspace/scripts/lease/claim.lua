-- claim: take job's lease with a new fencing generation, and say what the delivery may do.
-- KEYS: record, lease, the bucket's epoch (one hash slot). ARGV: owner, ttl_ms, deliveries, queued_ms,
-- record_ttl_ms, skew_ms, subject. Returns {mode, gen, failures, detail}; mode is run, unknown,
-- record_lost, settled, held or foreign (the id was first claimed from another subject, the detail).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = tonumber(redis.call('GET', KEYS[3]))
if not epoch then
  redis.call('SET', KEYS[3], now)
  epoch = now
end
local rec = redis.call('HMGET', KEYS[1], 'state', 'gen', 'failures', 'status', 'subject')
local state, gen, failures = rec[1], tonumber(rec[2]) or 0, tonumber(rec[3]) or 0
if rec[5] and rec[5] ~= ARGV[7] then
  return {'foreign', gen, failures, rec[5]}
end
if state == 'settled' then
  return {'settled', gen, failures, rec[4] or ''}
end
local holder = redis.call('GET', KEYS[2])
if holder then
  return {'held', gen, failures, holder}
end
local mode, next_state = 'run', 'claimed'
if not state then
  -- No record. A first delivery never ran. A redelivery of a job stored before this Redis's
  -- bucket's epoch began may have run under a record that Redis has since lost.
  if tonumber(ARGV[3]) > 1 and tonumber(ARGV[4]) < epoch + tonumber(ARGV[6]) then
    mode, next_state = 'record_lost', 'lost'
  end
elseif state == 'reserved' or state == 'dispatched' then
  mode, next_state = 'unknown', state
elseif state == 'lost' then
  mode, next_state = 'record_lost', state
end
-- Above every generation of the message's earlier deliveries, each of which claimed at most once,
-- even when their record is lost: a stale attempt's generation never comes back.
gen = math.max(gen + 1, tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'state', next_state, 'gen', gen, 'owner', ARGV[1], 'claimed_ms', now, 'subject', ARGV[7])
redis.call('SET', KEYS[2], gen .. ':' .. ARGV[1], 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {mode, gen, failures, ''}
