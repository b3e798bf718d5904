-- running -> stopped, once the job's processes are gone.
-- KEYS: 1 job hash, 2 notes list, 3 running zset, 4 done:stopped
-- ARGV: 1 key, 2 token, 3 owner, 4 reason, 5 retention (ms)
-- Returns: {OK} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local pool = {running = KEYS[3], done_stopped = KEYS[4], queues = {}, reserved = {},
              now = store_now(), retention = tonumber(ARGV[5])}
finish(pool, job, notes, key, 'stopped', ARGV[4])
return {OK}
