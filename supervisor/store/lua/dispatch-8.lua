-- Create a pending job, replacing a finished record of the same key (and dropping the
-- notes left from it).
-- KEYS: 1 job hash, 2 notes list, 3 pending zset,
--       4 done:succeeded, 5 done:failed, 6 done:stopped, 7 queue:<handler>, 8 write-probe
-- ARGV: 1 key, 2 handler, 3 payload (JSON text), 4 max_attempts, 5 events channel
-- Returns: {OK} or {JOB_EXISTS}

local job, notes = KEYS[1], KEYS[2]
local key, handler = ARGV[1], ARGV[2]

local state = redis.call('HGET', job, 'state')
if state == 'pending' or state == 'running' then
  return {JOB_EXISTS}
end

local pool = {pending = KEYS[3], queues = {[handler] = KEYS[7]}, reserved = {}}
refuse_when_full(KEYS[8])
local now = store_now()
redis.call('DEL', job, notes)
redis.call('ZREM', KEYS[4], key)
redis.call('ZREM', KEYS[5], key)
redis.call('ZREM', KEYS[6], key)
redis.call('HSET', job,
  'key', key, 'handler', handler, 'state', 'pending', 'payload', ARGV[3],
  'max_attempts', ARGV[4], 'attempts', 0, 'token', 0, 'lease_losses', 0,
  'stop_requested', 0, 'created_at', fmt(now), 'due', fmt(now))
enqueue(pool, job, key, now)
redis.call('PUBLISH', ARGV[5], 'w')
return {OK}
