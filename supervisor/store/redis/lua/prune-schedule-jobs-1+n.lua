-- Drop from a schedule's job index the keys that are no longer its live jobs (finished,
-- gone, or dispatched again without it or by another schedule); those still live stay,
-- scored now, so that the next prune looks at others first.
-- KEYS: 1 schedule-jobs:<schedule> zset, then the job hash of each key in ARGV 2...
-- ARGV: 1 schedule name, 2... keys listed in the index
-- Returns: {OK, count dropped}

local index = KEYS[1]
local now = store_now()
local dropped = 0
for i = 2, #ARGV do
  local f = redis.call('HMGET', KEYS[i], 'state', 'schedule')
  if (f[1] == 'pending' or f[1] == 'running') and f[2] == ARGV[1] then
    redis.call('ZADD', index, 'XX', now, ARGV[i])
  else
    dropped = dropped + redis.call('ZREM', index, ARGV[i])
  end
end
return {OK, dropped}
