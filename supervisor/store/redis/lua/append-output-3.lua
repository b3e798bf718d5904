-- Keep what one run of a job printed (Store.append_output): APPEND to the run's output
-- string, cut back to the newest max bytes once it holds `slack` more (so that the cut,
-- a copy of what is kept, is paid once per slack bytes), and note the run's numbers in
-- the job's output hash under its token, as JSON: a (attempt), s (supervisor), m (max
-- bytes), n (bytes printed), f (offset of the first kept byte), e (1: ended).
-- A run is taken while the job runs under its token (the first write of the run) or
-- once the hash knows it (a fenced run's tail); a new dispatch or a retry drops the hash
-- (lua/_lib.lua drop_output), so an older dispatch's run is refused.  The output lives
-- as long as the record: with its TTL once the job has ended (lua/_lib.lua
-- expire_output sets it at the end, this script for a tail written later).
-- KEYS: 1 job hash, 2 output hash, 3 the run's output string
-- ARGV: 1 token, 2 owner, 3 attempt, 4 data, 5 at (the offset of data's first byte in
--       what the run printed), 6 max bytes, 7 slack (bytes), 8 ended ('1' or '0')
-- Returns: {OK}, {JOB_NOT_FOUND} (the record is gone) or {STALE_TOKEN} (not a run of
--          the job's current dispatch)

local job, runs, text = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local current = redis.call('HMGET', job, 'state', 'token')
if not current[1] then
  return {JOB_NOT_FOUND}
end
local known = redis.call('HGET', runs, token)
local run
if known then
  run = cjson.decode(known)
elseif current[1] == 'running' and current[2] == token then
  run = {a = tonumber(ARGV[3]), s = ARGV[2], n = 0, f = 0, e = 0}
  redis.call('HINCRBY', job, 'output_runs', 1)  -- lua/_lib.lua expire_output reads it
else
  return {STALE_TOKEN}
end
local data, at = ARGV[4], tonumber(ARGV[5])
local max_bytes, slack = tonumber(ARGV[6]), tonumber(ARGV[7])
run.m = max_bytes
if at > run.n then
  -- The supervisor dropped the bytes in between: what is kept restarts at `at`.
  redis.call('SET', text, data)
  run.f, run.n = at, at + #data
elseif at + #data > run.n then
  redis.call('APPEND', text, string.sub(data, run.n - at + 1))
  run.n = at + #data
end
if run.n - run.f > max_bytes + slack then
  redis.call('SET', text, redis.call('GETRANGE', text, -max_bytes, -1))
  run.f = run.n - max_bytes
end
if ARGV[8] == '1' then
  run.e = 1
  -- APPEND leaves the string room to grow (up to 1 MiB more); the run's last write
  -- gives it back by writing the string anew.
  local kept = redis.call('GET', text)
  if kept then
    redis.call('SET', text, kept)
  end
end
redis.call('HSET', runs, token, cjson.encode(run))
local ttl = redis.call('PTTL', job)
if ttl > 0 then
  redis.call('PEXPIRE', runs, ttl)
  redis.call('PEXPIRE', text, ttl)
end
return {OK}
