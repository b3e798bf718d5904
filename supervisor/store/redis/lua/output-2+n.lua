-- What each run of a job printed (Store.output), read in one step so that a run's
-- kept bytes and its numbers agree (lua/append-output-3.lua keeps them).  Writes
-- nothing.
-- KEYS: 1 job hash, 2 output hash, then the output string of each run in ARGV
-- ARGV: per run, as the caller found them in the output hash: token, offset (the first
--       byte wanted)
-- Returns: {JOB_NOT_FOUND}, {KEYS_CHANGED} (the hash holds other runs than the caller
--          named: nothing read, read its runs again), or {OK, state, the job's token,
--          {token, the run's JSON, data, start (the offset of data's first byte)}...}

local job, runs = KEYS[1], KEYS[2]
local f = redis.call('HMGET', job, 'state', 'token')
if not f[1] then
  return {JOB_NOT_FOUND}
end
if redis.call('HLEN', runs) ~= #ARGV / 2 then
  return {KEYS_CHANGED}
end
local found = {}
for i = 1, #ARGV, 2 do
  local known = redis.call('HGET', runs, ARGV[i])
  if not known then
    return {KEYS_CHANGED}
  end
  local run = cjson.decode(known)
  -- The kept bytes are [f, n); readers see the newest m of them.
  local kept_from = math.max(run.f, run.n - run.m)
  local start = math.max(tonumber(ARGV[i + 1]), kept_from)
  local data = ''
  if start < run.n then
    data = redis.call('GETRANGE', KEYS[2 + (i + 1) / 2], start - run.f, -1)
  end
  found[#found + 1] = {ARGV[i], known, data, start}
end
return {OK, f[1], f[2], found}
