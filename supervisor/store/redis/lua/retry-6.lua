-- A failed or stopped job -> pending, claimable now, attempts, lease losses and snoozes
-- from 0,
-- its error, result, stop request and finish cleared; handler, payload, max_attempts
-- and checkpoint kept.  No longer expires with the retention of finished records.
-- KEYS: 1 job hash, 2 pending zset, 3 done:failed, 4 done:stopped, 5 its claim queue,
--       6 schedule-jobs:<schedule> (a name never written if none): those of the job as
--       the caller read them just before
-- ARGV: 1 key, 2 claim queue (handler, or handler:priority) and 3 schedule ('': none),
--       as the caller read them,
--       4 events channel
-- Returns: {OK, 'retried'}, {OK, state} (not retried: a live or succeeded job, left as
--          it is), {JOB_NOT_FOUND}, or {KEYS_CHANGED} (the job's queue or schedule is
--          not what the caller read: nothing changed, read again and retry)

local job, key = KEYS[1], ARGV[1]
local f = redis.call('HMGET', job, 'state', 'handler', 'schedule', 'priority')
local state = f[1]
if not state then
  return {JOB_NOT_FOUND}
end
if state ~= 'failed' and state ~= 'stopped' then
  return {OK, state}
end
if queue_id(f[2], f[4]) ~= ARGV[2] or (f[3] or '') ~= ARGV[3] then
  return {KEYS_CHANGED}
end
local pool = {pending = KEYS[2], queues = {[ARGV[2]] = KEYS[5]}, reserved = {},
              now = store_now()}
-- The first write may grow memory, so that Redis under maxmemory refuses the whole
-- script rather than a write halfway through it.
redis.call('HSET', job, 'state', 'pending', 'attempts', 0, 'lease_losses', 0,
           'snoozes', 0, 'stop_requested', 0, 'notes_sent', 0, 'output_runs', 0)
redis.call('HDEL', job, 'error', 'result', 'started_at', 'finished_at', 'owner',
           'lease_expired_at')
redis.call('PERSIST', job)
drop_output(job, key)
note_event(job, pool.now, 'retried', nil)
redis.call('ZREM', KEYS[3], key)
redis.call('ZREM', KEYS[4], key)
if f[3] then
  redis.call('ZADD', KEYS[6], pool.now, key)
end
enqueue(pool, job, key, pool.now)
wake_waiting(pool, ARGV[4], f[2])
return {OK, 'retried'}
