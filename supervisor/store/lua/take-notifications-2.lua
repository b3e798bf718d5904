-- Pop every queued message of a job the lease holds, oldest first.
-- KEYS: 1 job hash, 2 notes list
-- ARGV: 1 token, 2 owner
-- Returns: {OK, {payload...}}; nothing is taken for a lease not held

if not holds(KEYS[1], ARGV[1], ARGV[2]) then
  return {OK, {}}
end
local messages = redis.call('LRANGE', KEYS[2], 0, -1)
redis.call('DEL', KEYS[2])
return {OK, messages}
