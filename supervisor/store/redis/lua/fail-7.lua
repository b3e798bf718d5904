-- Fail the attempt: back to pending after a delay, or failed for good, or stopped if a
-- stop was requested.  The error is recorded either way.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset,
--       5 done:failed, 6 done:stopped, 7 queue:<handler> (of the job, as the caller read
--       it: a held job's handler does not change)
-- ARGV: 1 key, 2 token, 3 owner, 4 claim queue (handler, or handler:priority), 5 error, 6 final ('1' or '0'),
--       7 retry delay (ms), 8 retention (ms), 9 events channel
-- Returns: {OK, state after the call} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local pool = {pending = KEYS[3], running = KEYS[4], done_failed = KEYS[5],
              done_stopped = KEYS[6], queues = {[ARGV[4]] = KEYS[7]}, reserved = {},
              now = store_now(), retention = tonumber(ARGV[8])}
local error = ARGV[5]
redis.call('EXISTS', load_key(pool))  -- undeclared: read before the first write
local f = redis.call('HMGET', job, 'stop_requested', 'attempts', 'max_attempts')

if f[1] == '1' then
  finish(pool, job, notes, key, 'stopped', error)
  return {OK, 'stopped'}
end
-- max_attempts 0: the handler's limit applies, and the supervisor passes final
local max_attempts = tonumber(f[3])
if ARGV[6] == '1' or (max_attempts > 0 and tonumber(f[2]) >= max_attempts) then
  finish(pool, job, notes, key, 'failed', error)
  return {OK, 'failed'}
end
redis.call('HSET', job, 'error', error)
note_event(job, pool.now, 'failed', first_line(error) .. ' (will retry)')
requeue(pool, job, key, pool.now + tonumber(ARGV[7]))
if tonumber(ARGV[7]) <= 0 then
  wake_waiting(pool, ARGV[9], handler_of(ARGV[4]))
end
return {OK, 'pending'}
