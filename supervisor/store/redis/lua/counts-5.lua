-- Read-only: the jobs of each state, for `counts` (metrics, every few seconds) and
-- `snapshot`.  It calls no write command, so it runs while Redis refuses writes (see
-- members-3.lua).  A done:<state> entry older than the retention period counts as gone,
-- as it is (tidy and claim trim them), without a write here.
-- KEYS: 1 pending zset, 2 running zset, 3 done:succeeded, 4 done:failed, 5 done:stopped
-- ARGV: 1 retention (ms)
-- Returns: {OK, pending, running, succeeded, failed, stopped}

local kept_from = string.format('%.17g', store_now() - tonumber(ARGV[1]))
local answer = {OK, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
for i = 3, 5 do
  answer[#answer + 1] = redis.call('ZCOUNT', KEYS[i], kept_from, '+inf')
end
return answer
