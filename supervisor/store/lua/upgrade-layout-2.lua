-- Bring a pool's keys up to the current layout, once: a pool written before the
-- per-handler claim queues has its pending jobs only in `pending`, where no claim would
-- look; each is added to its handler's queue.  Idempotent, and a no-op once done.
-- KEYS: 1 pending zset, 2 layout version (string)
-- ARGV: 1 key prefix, 2 current layout version
-- Undeclared keys (found while it runs; built from the prefix): the job hash of each
-- pending job, and the queue of its handler.  They are read once per pool (until the
-- layout key is set); after that the script reads only its two declared keys.
-- Returns: {OK, jobs queued}

local LAYOUT = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '1') >= LAYOUT then
  return {OK, 0}
end
local queued = 0
local pending = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #pending, 2 do
  local key, score = pending[i], pending[i + 1]
  local handler = redis.call('HGET', job_key(ARGV[1], key), 'handler')
  if handler then
    redis.call('ZADD', queue_key(ARGV[1], handler), score, key)
    queued = queued + 1
  end
end
redis.call('SET', KEYS[2], LAYOUT)
return {OK, queued}
