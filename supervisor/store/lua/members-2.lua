-- Drop supervisors not seen within 3 x their lease ttl (and `seen` entries of ids that
-- never registered, left by renewals) and list the others.
-- KEYS: 1 sup hash, 2 seen zset
-- ARGV: none
-- Returns: {OK, store time (ms), {id, info JSON, last seen (ms)}...}

local LIVE_TTLS = 3
local now = store_now()
local members = {}
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local id, info = entries[i], entries[i + 1]
  local seen = redis.call('ZSCORE', KEYS[2], id)
  local ttl = tonumber(cjson.decode(info).lease_ttl) * 1000
  if seen and now - tonumber(seen) <= LIVE_TTLS * ttl then
    members[#members + 1] = {id, info, fmt(tonumber(seen))}
  else
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if redis.call('HEXISTS', KEYS[1], id) == 0 then
    redis.call('ZREM', KEYS[2], id)
  end
end
return {OK, fmt(now), members}
