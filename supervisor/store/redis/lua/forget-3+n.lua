-- Trim the done lists: entries older than the retention period, and the given keys
-- if their record is gone.
-- KEYS: 1 done:succeeded, 2 done:failed, 3 done:stopped, then the job hash of each key
--       in ARGV 2...
-- ARGV: 1 retention (ms), 2... keys whose record was found missing
-- Returns: {OK}

local cutoff = after(store_now() - tonumber(ARGV[1]))
for i = 1, 3 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', cutoff)
end
for i = 2, #ARGV do
  if redis.call('EXISTS', KEYS[i + 2]) == 0 then
    for d = 1, 3 do
      redis.call('ZREM', KEYS[d], ARGV[i])
    end
  end
end
return {OK}
