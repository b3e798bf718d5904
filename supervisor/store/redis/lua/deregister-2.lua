-- Remove a supervisor's membership entry if it is still this instance's.
-- KEYS: 1 sup hash, 2 seen zset
-- ARGV: 1 id, 2 instance
-- Returns: {OK}

local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and cjson.decode(current).instance == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return {OK}
