-- Helpers shared by every command script: redis_scripts.py prepends this file.
--
-- Times are store milliseconds with a microsecond fraction, read from Redis TIME.
-- Lua 5.1 prints numbers with 14 digits, so never tostring() or `..` a time: pass it
-- to redis.call as a number or format it with fmt().
--
-- `pool` tables, built by each script from its KEYS, name the pool-wide keys that
-- finish() and front_score() touch: pending, running, done_succeeded, done_failed,
-- done_stopped, plus now and retention (ms).

local OK, JOB_EXISTS, JOB_NOT_FOUND, STALE_TOKEN, SUPERVISOR_ID_TAKEN = 0, 1, 2, 3, 4

local function store_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

local function fmt(ms)
  return string.format('%.3f', ms)
end

-- An exclusive score bound, exact to the last bit.
local function after(ms)
  return string.format('(%.17g', ms)
end

-- Per-job key names; they mirror supervisor/store/redis_keys.py.
local function job_key(prefix, key)
  return prefix .. 'job:' .. key
end

local function notes_key(prefix, key)
  return prefix .. 'notes:' .. key
end

-- Is the job running under exactly this lease?
local function holds(job, token, owner)
  local f = redis.call('HMGET', job, 'state', 'token', 'owner')
  return f[1] == 'running' and f[2] == token and f[3] == owner
end

-- Score that puts a job ahead of every pending job, and never in the future.
local function front_score(pool)
  local first = redis.call('ZRANGE', pool.pending, 0, 0, 'WITHSCORES')
  local oldest = pool.now
  if first[2] and tonumber(first[2]) < oldest then
    oldest = tonumber(first[2])
  end
  return oldest - 1
end

-- Make the job claimable at `score`, holding no lease.
local function requeue(pool, job, key, score)
  redis.call('HSET', job, 'state', 'pending', 'due', fmt(score))
  redis.call('HDEL', job, 'lease_deadline', 'pid', 'rss_bytes', 'cpu_percent')
  redis.call('ZREM', pool.running, key)
  redis.call('ZADD', pool.pending, score, key)
end

-- End the job in a final state: keep its record for the retention period, list it in
-- done_<state>, drop its notifications.  `error` may be nil (left as it is) or false
-- (cleared).
local function finish(pool, job, notes, key, state, error)
  redis.call('HSET', job, 'state', state, 'finished_at', fmt(pool.now))
  if error then
    redis.call('HSET', job, 'error', error)
  elseif error == false then
    redis.call('HDEL', job, 'error')
  end
  redis.call('HDEL', job, 'lease_deadline', 'due', 'pid', 'rss_bytes', 'cpu_percent')
  redis.call('PEXPIRE', job, pool.retention)
  redis.call('DEL', notes)
  redis.call('ZREM', pool.pending, key)
  redis.call('ZREM', pool.running, key)
  local done = pool['done_' .. state]
  redis.call('ZADD', done, pool.now, key)
  redis.call('ZREMRANGEBYSCORE', done, '-inf', after(pool.now - pool.retention))
end
