-- Add or refresh a supervisor's membership entry and mark it seen, unless another
-- instance with the same id was seen within its lease ttl.
-- KEYS: 1 sup hash (id -> info JSON), 2 seen zset (id -> last seen ms)
-- ARGV: 1 id, 2 instance, 3 info JSON (with instance and lease_ttl in seconds)
-- Returns: {OK} or {SUPERVISOR_ID_TAKEN}

local id, instance = ARGV[1], ARGV[2]
local now = store_now()
local current = redis.call('HGET', KEYS[1], id)
if current then
  local info = cjson.decode(current)
  local seen = redis.call('ZSCORE', KEYS[2], id)
  if info.instance ~= instance and seen
      and now - tonumber(seen) <= tonumber(info.lease_ttl) * 1000 then
    return {SUPERVISOR_ID_TAKEN}
  end
end
redis.call('HSET', KEYS[1], id, ARGV[3])
redis.call('ZADD', KEYS[2], now, id)
return {OK}
