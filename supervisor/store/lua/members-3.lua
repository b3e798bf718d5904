-- Read-only: the membership entries with their seen times, the running jobs each owner
-- holds per handler, and the live reservations for each member, for `members` and
-- `snapshot`.  It calls no write command, so it runs while Redis refuses writes (out of
-- memory, a read-only replica); it has no `#!lua flags=no-writes` line because Redis
-- 6.2 cannot compile one, and Redis checks such a script's writes only as it makes them.
-- KEYS: 1 sup hash (id -> info JSON), 2 seen zset (id -> last seen ms), 3 running zset
-- ARGV: 1 key prefix
-- Undeclared keys (found while it runs; built from the prefix): the job hash of each
-- running job, and reserved:<id> of each member.
-- Returns: {OK, store time (ms), {id, info JSON}..., {id, last seen (ms)}...,
--           {owner, handler, running jobs}..., {id, pending jobs reserved for it}...}
-- (each list flat)

local prefix = ARGV[1]
local now = store_now()
local entries = redis.call('HGETALL', KEYS[1])
local seen = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')

local counts, load = {}, {}
for _, key in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local f = redis.call('HMGET', job_key(prefix, key), 'owner', 'handler', 'state')
  if f[3] == 'running' and f[1] and f[2] then
    local slot = f[1] .. '\0' .. f[2]
    if not counts[slot] then
      counts[slot] = 0
      load[#load + 1] = {f[1], f[2], slot}
    end
    counts[slot] = counts[slot] + 1
  end
end
local running = {}
for _, entry in ipairs(load) do
  running[#running + 1] = entry[1]
  running[#running + 1] = entry[2]
  running[#running + 1] = counts[entry[3]]
end

local inbound = {}
for i = 1, #entries, 2 do
  local n = redis.call('ZCOUNT', reserved_key(prefix, entries[i]), after(now), '+inf')
  if n > 0 then
    inbound[#inbound + 1] = entries[i]
    inbound[#inbound + 1] = n
  end
end
return {OK, fmt(now), entries, seen, running, inbound}
