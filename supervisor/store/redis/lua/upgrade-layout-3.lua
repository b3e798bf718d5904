-- Bring a pool's keys up to the current layout.  Each step is idempotent:
-- 2. A pool written before the per-handler claim queues has its pending jobs only in
--    `pending`, where no claim would look; each is added to its handler's queue (once:
--    the layout key then says 2 or more).
-- 3. The running jobs per owner and handler (running-load, see load_key) are counted
--    again from the running jobs, on every call: each supervisor calls it once, before
--    its first claim, so that counts a supervisor of an older version left behind (it
--    starts and ends runs without counting them) are set right once a rolling deploy
--    has replaced every old supervisor.
-- KEYS: 1 pending zset, 2 layout version (string), 3 running zset
-- ARGV: 1 key prefix, 2 current layout version
-- Undeclared keys (found while it runs; built from the prefix): the job hash of each
-- pending job (once) and of each running job, the queue of a pending job's handler, and
-- running-load.
-- Returns: {OK, jobs queued}

local LAYOUT = tonumber(ARGV[2])
local prefix = ARGV[1]
local queued = 0
if tonumber(redis.call('GET', KEYS[2]) or '1') < 2 then
  local pending = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #pending, 2 do
    local key, score = pending[i], pending[i + 1]
    local handler = redis.call('HGET', job_key(prefix, key), 'handler')
    if handler then
      redis.call('ZADD', queue_key(prefix, handler), score, key)
      queued = queued + 1
    end
  end
end

local pool = {running = KEYS[3]}
redis.call('DEL', load_key(pool))
for _, key in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local f = redis.call('HMGET', job_key(prefix, key), 'state', 'owner', 'handler', 'group')
  if f[1] == 'running' and f[2] and f[3] then
    count_run(pool, f[2], f[3], f[4], 1)
  end
end
redis.call('SET', KEYS[2], LAYOUT)
return {OK, queued}
