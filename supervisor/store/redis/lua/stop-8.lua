-- Ask for a stop: a pending job ends stopped at once, a running job is marked and its
-- owner told; a finished job is left as it is.  A producer's plan passes its tick:
-- nothing changes unless it is current.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped,
--       6 queue:<handler>, 7 reserved:<reserved_for> (a name never written if none):
--       those of the job as the caller read them just before; 8 schedule:<name> hash
--       of the plan's tick (a name never written without one)
-- ARGV: 1 key, 2 retention (ms), 3 events channel, 4 claim queue (handler, or
--       handler:priority) and 5 reserved_for ('': none), as the caller read them, 6 the plan's tick ('' for none), 7 its owner
-- Returns: {OK, state after the call}, {JOB_NOT_FOUND}, {STALE_TICK}, or {KEYS_CHANGED}
--          (a pending job's handler or reservation is no longer what the caller read:
--          nothing changed, read again and retry)

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not tick_is_current(KEYS[8], ARGV[6], ARGV[7]) then
  return {STALE_TICK}
end
local f = redis.call('HMGET', job, 'state', 'handler', 'reserved_for', 'priority')
local state = f[1]
if not state then
  return {JOB_NOT_FOUND}
end
if state == 'pending' then
  if queue_id(f[2], f[4]) ~= ARGV[4] or (f[3] or '') ~= ARGV[5] then
    return {KEYS_CHANGED}
  end
  local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
                queues = {[ARGV[4]] = KEYS[6]}, reserved = {[ARGV[5]] = KEYS[7]},
                now = store_now(), retention = tonumber(ARGV[2])}
  redis.call('HSET', job, 'stop_requested', 1)
  finish(pool, job, notes, key, 'stopped', 'stopped while pending')
  return {OK, 'stopped'}
end
if state == 'running' then
  if redis.call('HGET', job, 'stop_requested') ~= '1' then
    note_event(job, store_now(), 'stopping', 'stop')
  end
  redis.call('HSET', job, 'stop_requested', 1)
  local owner = redis.call('HGET', job, 'owner')
  if owner then
    ring(ARGV[3], owner, 's:' .. key)  -- its holder's doorbell
  end
end
return {OK, state}
