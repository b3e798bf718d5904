-- Set a schedule's last outcome and detail, only if its last fired tick is still this
-- one (a producer's plan applied, or the error it raised).
-- KEYS: 1 schedule:<name> hash
-- ARGV: 1 tick (epoch seconds), 2 outcome, 3 detail (JSON text)
-- Returns: {OK, 1 if recorded, 0 if the tick is no longer the last one}

local last = redis.call('HGET', KEYS[1], 'last_tick')
if not last or tonumber(last) ~= tonumber(ARGV[1]) then
  return {OK, 0}
end
redis.call('HSET', KEYS[1], 'outcome', ARGV[2], 'detail', ARGV[3])
return {OK, 1}
