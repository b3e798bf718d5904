-- Extend the leases an owner holds and store their stats; mark the owner seen if its
-- membership entry is this instance's; note that the store took a write.
-- KEYS: 1 running zset, 2 seen zset, 3 sup hash, 4 health hash,
--       then per lease 2 keys: job hash, notes list
-- ARGV: 1 owner, 2 instance, 3 lease ttl (ms), 4 health gap (ms),
--       then per lease 5 values: key, token, pid, rss_bytes, cpu_percent ('' = unknown)
-- Returns: {OK, store time (ms), {lost key, its token, ...}, {stop-requested keys},
--           {notified keys},
--           membership ('ok', 'missing' or 'taken')}

local IN_A_ROW_TTLS = POLICY.losses_reset_ttls  -- a lease held this long resets losses
local owner, instance = ARGV[1], ARGV[2]
local ttl = tonumber(ARGV[3])
local now = store_now()
local deadline = now + ttl
local lost, stopping, notified = {}, {}, {}

local STATS = {'pid', 'rss_bytes', 'cpu_percent'}
for n = 0, (#ARGV - 4) / 5 - 1 do
  local i = 5 + 5 * n
  local key, token = ARGV[i], ARGV[i + 1]
  local job, notes = KEYS[5 + 2 * n], KEYS[6 + 2 * n]
  local f = redis.call('HMGET', job, 'state', 'token', 'owner', 'stop_requested',
                       'started_at', 'pid')
  if f[1] == 'running' and f[2] == token and f[3] == owner then
    redis.call('HSET', job, 'lease_deadline', fmt(deadline))
    redis.call('ZADD', KEYS[1], deadline, key)
    if not f[6] and ARGV[i + 2] ~= '' then
      note_pid(job, token, ARGV[i + 2])
    end
    for s, field in ipairs(STATS) do
      local value = ARGV[i + 1 + s]
      if value ~= '' then
        redis.call('HSET', job, field, value)
      end
    end
    if f[5] and now - tonumber(f[5]) >= IN_A_ROW_TTLS * ttl then
      redis.call('HSET', job, 'lease_losses', 0)
    end
    if f[4] == '1' then
      stopping[#stopping + 1] = key
    end
    if redis.call('LLEN', notes) > 0 then
      notified[#notified + 1] = key
    end
  else
    lost[#lost + 1] = key
    lost[#lost + 1] = token
  end
end

local membership = 'missing'
local entry = redis.call('HGET', KEYS[3], owner)
if entry then
  if cjson.decode(entry).instance == instance then
    membership = 'ok'
    redis.call('ZADD', KEYS[2], now, owner)
  else
    membership = 'taken'
  end
end
touch_health(KEYS[4], now, tonumber(ARGV[4]))
return {OK, fmt(now), lost, stopping, notified, membership}
