-- running -> pending without spending the attempt, claimable after a delay, with one
-- more snooze counted (sandbox.Snooze); or stopped if a stop was requested.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped,
--       6 queue:<handler> (of the job, as the caller read it: a held job's handler does
--       not change)
-- ARGV: 1 key, 2 token, 3 owner, 4 claim queue (handler, or handler:priority),
--       5 delay (ms, 0 or more), 6 retention (ms), 7 events channel, 8 detail (for the
--       history)
-- Returns: {OK, state after the call} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
              queues = {[ARGV[4]] = KEYS[6]}, reserved = {},
              now = store_now(), retention = tonumber(ARGV[6])}
redis.call('EXISTS', load_key(pool))  -- undeclared: read before the first write

if redis.call('HGET', job, 'stop_requested') == '1' then
  finish(pool, job, notes, key, 'stopped', 'stop requested; snoozed by ' .. ARGV[3])
  return {OK, 'stopped'}
end
redis.call('HINCRBY', job, 'attempts', -1)
redis.call('HINCRBY', job, 'snoozes', 1)
note_event(job, pool.now, 'snoozed', ARGV[8])
local delay = math.max(0, tonumber(ARGV[5]))
requeue(pool, job, key, pool.now + delay)
if delay <= 0 then
  wake_waiting(pool, ARGV[7], handler_of(ARGV[4]))
end
return {OK, 'pending'}
