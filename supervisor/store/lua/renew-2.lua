-- Extend the leases an owner holds, store their stats and mark the owner seen.
-- KEYS: 1 running zset, 2 seen zset
-- ARGV: 1 key prefix, 2 owner, 3 lease ttl (ms),
--       then per lease 5 values: key, token, pid, rss_bytes, cpu_percent ('' = unknown)
-- Returns: {OK, store time (ms), {lost keys}, {stop-requested keys}, {notified keys}}

local prefix, owner = ARGV[1], ARGV[2]
local now = store_now()
local deadline = now + tonumber(ARGV[3])
local lost, stopping, notified = {}, {}, {}

local STATS = {'pid', 'rss_bytes', 'cpu_percent'}
for i = 4, #ARGV, 5 do
  local key, token = ARGV[i], ARGV[i + 1]
  local job = job_key(prefix, key)
  local f = redis.call('HMGET', job, 'state', 'token', 'owner', 'stop_requested')
  if f[1] == 'running' and f[2] == token and f[3] == owner then
    redis.call('HSET', job, 'lease_deadline', fmt(deadline))
    redis.call('ZADD', KEYS[1], deadline, key)
    for s, field in ipairs(STATS) do
      local value = ARGV[i + 1 + s]
      if value ~= '' then
        redis.call('HSET', job, field, value)
      end
    end
    if f[4] == '1' then
      stopping[#stopping + 1] = key
    end
    if redis.call('LLEN', notes_key(prefix, key)) > 0 then
      notified[#notified + 1] = key
    end
  else
    lost[#lost + 1] = key
  end
end
redis.call('ZADD', KEYS[2], now, owner)
return {OK, fmt(now), lost, stopping, notified}
