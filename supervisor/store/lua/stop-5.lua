-- Ask for a stop: a pending job ends stopped at once, a running job is marked and its
-- owner told; a finished job is left as it is.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped
-- ARGV: 1 key, 2 key prefix, 3 retention (ms), 4 events channel
-- Returns: {OK, state after the call} or {JOB_NOT_FOUND}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
local state = redis.call('HGET', job, 'state')
if not state then
  return {JOB_NOT_FOUND}
end
if state == 'pending' then
  local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
                prefix = ARGV[2], now = store_now(), retention = tonumber(ARGV[3])}
  redis.call('HSET', job, 'stop_requested', 1)
  finish(pool, job, notes, key, 'stopped', 'stopped before it ran')
  return {OK, 'stopped'}
end
if state == 'running' then
  redis.call('HSET', job, 'stop_requested', 1)
  redis.call('PUBLISH', ARGV[4], 's:' .. key)
end
return {OK, state}
