-- Create pending jobs, each as one dispatch: a live key is left as it is, a finished
-- record of the key is replaced (and the notes left from it dropped).  Each job is due
-- at max(now, run_at).  A key given twice is created once, by its first request.
-- A producer's plan passes its tick: nothing is created unless it is current.
-- KEYS: 1 pending zset, 2 done:succeeded, 3 done:failed, 4 done:stopped, 5 write-probe,
--       6 schedule:<name> hash of the plan's tick (a name never written without one),
--       then per request: job hash, notes list, queue:<handler>,
--       schedule-jobs:<schedule> (a name never written if it has no schedule)
-- ARGV: 1 events channel, 2 the plan's tick ('' for none), 3 its owner, then per
--       request: key, handler, payload (JSON text), max_attempts, run_at (ms, '' for
--       now), schedule ('' for none)
-- Returns: {OK, {1 where created, 0 where the key was live}}, or {STALE_TICK}

local FIXED_KEYS, KEYS_PER, FIXED_ARGS, ARGS_PER = 6, 4, 3, 6
if not tick_is_current(KEYS[6], ARGV[2], ARGV[3]) then
  return {STALE_TICK}
end
local pool = {pending = KEYS[1], done_succeeded = KEYS[2], done_failed = KEYS[3],
              done_stopped = KEYS[4], queues = {}, reserved = {}}

local requests, created, taken = {}, {}, {}
for i = 0, (#ARGV - FIXED_ARGS) / ARGS_PER - 1 do
  local k, a = FIXED_KEYS + i * KEYS_PER, FIXED_ARGS + i * ARGS_PER
  local r = {key = ARGV[a + 1], handler = ARGV[a + 2], payload = ARGV[a + 3],
             max_attempts = ARGV[a + 4], run_at = tonumber(optional(ARGV[a + 5])),
             schedule = optional(ARGV[a + 6]),
             job = KEYS[k + 1], notes = KEYS[k + 2], queue = KEYS[k + 3], index = KEYS[k + 4]}
  local state = redis.call('HGET', r.job, 'state')
  if taken[r.key] or state == 'pending' or state == 'running' then
    created[#created + 1] = 0
  else
    taken[r.key] = true
    requests[#requests + 1] = r
    created[#created + 1] = 1
  end
end

if #requests > 0 then
  refuse_when_full(KEYS[5])
  pool.now = store_now()
  for _, r in ipairs(requests) do
    pool.queues = {[r.handler] = r.queue}
    create_job(pool, r)
  end
  redis.call('PUBLISH', ARGV[1], 'w')
end
return {OK, created}
