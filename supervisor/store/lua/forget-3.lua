-- Trim the done lists: entries older than the retention period, and the given keys
-- if their record is gone.
-- KEYS: 1 done:succeeded, 2 done:failed, 3 done:stopped
-- ARGV: 1 key prefix, 2 retention (ms), 3... keys whose record was found missing
-- Returns: {OK}

local cutoff = after(store_now() - tonumber(ARGV[2]))
for _, done in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', done, '-inf', cutoff)
end
for i = 3, #ARGV do
  if redis.call('EXISTS', job_key(ARGV[1], ARGV[i])) == 0 then
    for _, done in ipairs(KEYS) do
      redis.call('ZREM', done, ARGV[i])
    end
  end
end
return {OK}
