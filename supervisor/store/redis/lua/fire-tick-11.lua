-- Fire a schedule's tick, once in the pool: refused ("ended") while the schedule is ended
-- and its definition (fingerprint) is the one that ended it (another clears the end);
-- refused ("early") before not_before by the
-- store's clock, and ("taken") when the schedule's last fired tick is this one or later
-- (unless it is this one, "released": given back unapplied, it fires again), and
-- ("stale") when the last fired tick is no longer the basis its missed count was
-- counted from (another supervisor fired a tick since the caller's read);
-- otherwise the tick is recorded as fired and, for a handler schedule, its job created
-- as dispatch does ("dispatched"), or left as it is if its key is live ("skipped").
-- A producer's tick ("fired") creates nothing: its caller runs the producer next.
-- The schedule hash: last_tick (epoch seconds, the caller's text, compared as a number),
-- fingerprint, fired_by, fired_at (store ms), outcome, detail (JSON text), fires,
-- skipped, missed; ended_at (store ms) and ended_tick while ended
-- (lua/record-tick-outcome-1.lua).
-- KEYS: 1 schedule:<name> hash, 2 schedules set (every name), 3 write-probe,
--       4 pending zset, 5 done:succeeded, 6 done:failed, 7 done:stopped,
--       8 job hash, 9 notes list, 10 queue:<handler>, 11 schedule-jobs:<job's schedule>
--       (8-11: names never written for a tick without a job)
-- ARGV: 1 schedule name, 2 tick (epoch seconds), 3 not_before (ms), 4 fingerprint,
--       5 owner, 6 missed, 7 events channel, 8 job key ('' for none), 9 handler,
--       10 payload, 11 max_attempts, 12 run_at (ms, or ''), 13 job's schedule,
--       14 detail (the job key as JSON text), 15 basis: the last fired tick missed was
--       counted from ('-': never fired; '' or absent: unchecked, a caller from before it)
-- Returns: {OK, outcome, store time (ms), last fired tick after the call or false}

local record = KEYS[1]
local now = store_now()
local fired = redis.call('HMGET', record, 'last_tick', 'outcome', 'ended_at', 'fingerprint')
local last = fired[1]
local ended = fired[3] ~= false
if ended and fired[4] == ARGV[4] then
  return {OK, 'ended', fmt(now), last or false}
end
if tonumber(ARGV[3]) > now then
  return {OK, 'early', fmt(now), last or false}
end
local refire = fired[2] == 'released' and last and tonumber(last) == tonumber(ARGV[2])
if last and tonumber(last) >= tonumber(ARGV[2]) and not refire then
  return {OK, 'taken', fmt(now), last}
end
local basis = ARGV[15] or ''
if basis ~= '' then
  local counted = basis ~= '-' and tonumber(basis)
  local current = last and tonumber(last)
  if counted ~= current then
    return {OK, 'stale', fmt(now), last or false}
  end
end

refuse_when_full(KEYS[3])
if ended then  -- its definition changed: it starts again
  redis.call('HDEL', record, 'ended_at', 'ended_tick')
end
local outcome, skipped = 'fired', 0
local key = ARGV[8]
if key ~= '' then
  local state = redis.call('HGET', KEYS[8], 'state')
  if state == 'pending' or state == 'running' then
    outcome, skipped = 'skipped', 1
  else
    outcome = 'dispatched'
    local pool = {pending = KEYS[4], done_succeeded = KEYS[5], done_failed = KEYS[6],
                  done_stopped = KEYS[7], queues = {[ARGV[9]] = KEYS[10]}, reserved = {},
                  now = now}
    create_job(pool, {key = key, handler = ARGV[9], payload = ARGV[10],
                      max_attempts = ARGV[11], run_at = tonumber(optional(ARGV[12])),
                      schedule = ARGV[13], job = KEYS[8], notes = KEYS[9],
                      replaces = state ~= false,
                      index = KEYS[11]})
    local run_at = tonumber(optional(ARGV[12]))
    if not run_at or run_at <= now then
      wake_waiting(pool, ARGV[7], ARGV[9])
    end
  end
end

redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', record, 'last_tick', ARGV[2], 'fingerprint', ARGV[4],
           'fired_by', ARGV[5], 'fired_at', fmt(now), 'outcome', outcome)
if key ~= '' then
  redis.call('HSET', record, 'detail', ARGV[14])
else
  redis.call('HDEL', record, 'detail')
end
redis.call('HINCRBY', record, 'fires', 1)
redis.call('HINCRBY', record, 'skipped', skipped)
redis.call('HINCRBY', record, 'missed', tonumber(ARGV[6]))
return {OK, outcome, fmt(now), ARGV[2]}
