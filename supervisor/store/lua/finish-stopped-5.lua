-- running -> stopped, once the job's processes are gone.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped
-- ARGV: 1 key, 2 token, 3 owner, 4 key prefix, 5 reason, 6 retention (ms)
-- Returns: {OK} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
              prefix = ARGV[4], now = store_now(), retention = tonumber(ARGV[6])}
finish(pool, job, notes, key, 'stopped', ARGV[5])
return {OK}
