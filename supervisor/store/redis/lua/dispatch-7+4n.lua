-- Create pending jobs, each as one dispatch: a live key is left as it is, a finished
-- record of the key is replaced (and the notes left from it dropped) unless it finished
-- within the request's unique window, and nothing is created while the pool holds
-- max_pending pending jobs (the settings hash; none if unset).  Each job is due at
-- max(now, run_at).  A key given twice is created once, by its first request.
-- A producer's plan passes its tick: nothing is created unless it is current.
-- KEYS: 1 pending zset, 2 done:succeeded, 3 done:failed, 4 done:stopped, 5 write-probe,
--       6 schedule:<name> hash of the plan's tick (a name never written without one),
--       7 settings hash, then per request: job hash, notes list, claim queue
--       (queue:<handler>, or queue:<handler>:<priority>),
--       schedule-jobs:<schedule> (a name never written if it has no schedule)
-- ARGV: 1 events channel (a due job wakes one waiting supervisor of its handler), 2 the plan's tick ('' for none), 3 its owner, then per
--       request: key, handler, payload (JSON text), max_attempts, run_at (ms, '' for
--       now), schedule ('' for none), priority (0-9), group ('' for none), unique
--       window (ms, 0 for none), traceparent and tracestate ('' for none)
-- Returns: {OK, {per request: 1 created, 0 the key was live, 2 it finished within the
--          unique window, 3 the pool holds max_pending pending jobs}, max_pending
--          or false, the job's hash (as HGETALL) when one request created its job}, or
--          {STALE_TICK}

local FIXED_KEYS, KEYS_PER, FIXED_ARGS, ARGS_PER = 7, 4, 3, 11
if not tick_is_current(KEYS[6], ARGV[2], ARGV[3]) then
  return {STALE_TICK}
end
local pool = {pending = KEYS[1], done_succeeded = KEYS[2], done_failed = KEYS[3],
              done_stopped = KEYS[4], queues = {}, reserved = {}}

local max_pending = tonumber(redis.call('HGET', KEYS[7], 'max_pending') or '')
local pending = max_pending and redis.call('ZCARD', pool.pending) or 0
local now = store_now()
local requests, created, taken = {}, {}, {}
for i = 0, (#ARGV - FIXED_ARGS) / ARGS_PER - 1 do
  local k, a = FIXED_KEYS + i * KEYS_PER, FIXED_ARGS + i * ARGS_PER
  local r = {key = ARGV[a + 1], handler = ARGV[a + 2], payload = ARGV[a + 3],
             max_attempts = ARGV[a + 4], run_at = tonumber(optional(ARGV[a + 5])),
             schedule = optional(ARGV[a + 6]), priority = tonumber(ARGV[a + 7]),
             group = optional(ARGV[a + 8]), unique_for = tonumber(ARGV[a + 9]),
             traceparent = optional(ARGV[a + 10]), tracestate = optional(ARGV[a + 11]),
             job = KEYS[k + 1], notes = KEYS[k + 2], queue = KEYS[k + 3], index = KEYS[k + 4]}
  local f = redis.call('HMGET', r.job, 'state', 'finished_at')
  local state = f[1]
  r.replaces = state ~= false
  if taken[r.key] or state == 'pending' or state == 'running' then
    created[#created + 1] = 0
  elseif f[2] and r.unique_for > 0 and now - tonumber(f[2]) < r.unique_for then
    created[#created + 1] = 2
  elseif max_pending and pending >= max_pending then
    created[#created + 1] = 3
  else
    taken[r.key] = true
    requests[#requests + 1] = r
    created[#created + 1] = 1
    pending = pending + 1
  end
end

local record = false
if #requests > 0 then
  if requests[1].replaces then  -- its first write deletes; a new job's is an HSET
    refuse_when_full(KEYS[5])
  end
  pool.now = now
  for _, r in ipairs(requests) do
    pool.queues = {[queue_id(r.handler, r.priority)] = r.queue}
    record = create_job(pool, r)
  end
  local due_now = {}
  for _, r in ipairs(requests) do
    if not r.run_at or r.run_at <= now then
      due_now[r.handler] = (due_now[r.handler] or 0) + 1
    end
  end
  for handler, n in pairs(due_now) do
    wake_waiting(pool, ARGV[1], handler, n)
  end
end
if not (#created == 1 and created[1] == 1) then  -- a caller's one job: its record
  record = false
end
return {OK, created, max_pending or false, record}
