-- Read-only: the membership entries with their seen times, the running jobs each owner
-- holds per handler, and the live reservations for each member, for `members` and
-- `snapshot`.  It calls no write command, so it runs while Redis refuses writes (out of
-- memory, a read-only replica); it has no `#!lua flags=no-writes` line because Redis
-- 6.2 cannot compile one, and Redis checks such a script's writes only as it makes them.
-- KEYS: 1 sup hash (id -> info JSON), 2 seen zset (id -> last seen ms), 3 running zset
-- ARGV: 1 key prefix
-- Undeclared keys (built from the names of declared ones): the running jobs per owner
-- and handler (running-load, see load_key), and reserved:<id> of each member.
-- Returns: {OK, store time (ms), {id, info JSON}..., {id, last seen (ms)}...,
--           {owner, handler, running jobs}..., {id, pending jobs reserved for it}...}
-- (each list flat)

local prefix = ARGV[1]
local now = store_now()
local entries = redis.call('HGETALL', KEYS[1])
local seen = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')

local running = {}
local load = redis.call('HGETALL', load_key({running = KEYS[3]}))
for i = 1, #load, 2 do
  -- owner NUL handler; a handler's own totals (no NUL, or two) are not an owner's
  local nul = string.find(load[i], '\0', 1, true)
  if nul and string.sub(load[i], nul + 1, nul + 1) ~= '\0' then
    running[#running + 1] = string.sub(load[i], 1, nul - 1)
    running[#running + 1] = string.sub(load[i], nul + 1)
    running[#running + 1] = tonumber(load[i + 1])
  end
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
