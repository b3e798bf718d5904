-- The write part of a snapshot: trim the done lists past the retention period, drop
-- membership entries silent for so long that they are garbage, and note that the store
-- took a write.  An entry silent for 3 x its lease ttl is only left out of the listing
-- (by the caller): a supervisor stalled that long still renews as "ok" afterwards.
-- KEYS: 1 done:succeeded, 2 done:failed, 3 done:stopped, 4 sup hash, 5 seen zset,
--       6 health hash
-- ARGV: 1 retention (ms), 2 health gap (ms), 3 garbage after at least (ms)
-- Returns: {OK}

local GARBAGE_TTLS = POLICY.live_ttls
local now = store_now()
-- First: Redis refuses a script's first write under OOM only if that write may grow
-- memory (HSET may, ZREM may not), and lets every later one through.
touch_health(KEYS[6], now, tonumber(ARGV[2]))
local cutoff = after(now - tonumber(ARGV[1]))
for i = 1, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', cutoff)
end
local entries = redis.call('HGETALL', KEYS[4])
for i = 1, #entries, 2 do
  local id = entries[i]
  local seen = redis.call('ZSCORE', KEYS[5], id)
  local ttl = tonumber(cjson.decode(entries[i + 1]).lease_ttl) * 1000
  local limit = math.max(GARBAGE_TTLS * ttl, tonumber(ARGV[3]))
  if not seen or now - tonumber(seen) > limit then
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
  if redis.call('HEXISTS', KEYS[4], id) == 0 then
    redis.call('ZREM', KEYS[5], id)
  end
end
return {OK}
