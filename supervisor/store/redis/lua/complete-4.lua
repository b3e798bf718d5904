-- running -> succeeded with the result.
-- KEYS: 1 job hash, 2 notes list, 3 running zset, 4 done:succeeded
-- ARGV: 1 key, 2 token, 3 owner, 4 result (JSON text), 5 retention (ms)
-- Returns: {OK} or {STALE_TOKEN}

local pool = {running = KEYS[3], done_succeeded = KEYS[4], queues = {}, reserved = {},
              now = store_now(), retention = tonumber(ARGV[5])}
if not complete_job(pool, KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4]) then
  return {STALE_TOKEN}
end
return {OK}
