-- Remove the messages with seq <= `upto` of a job the lease holds.
-- KEYS: 1 job hash, 2 notes list
-- ARGV: 1 token, 2 owner, 3 upto (seq)
-- Returns: {OK}; nothing changes for a lease not held

if not holds(KEYS[1], ARGV[1], ARGV[2]) then
  return {OK}
end
local gone = math.min(tonumber(ARGV[3]) - notes_acked(KEYS[1]), redis.call('LLEN', KEYS[2]))
if gone > 0 then
  -- The counter first: a refused write must not leave the list trimmed without it.
  redis.call('HINCRBY', KEYS[1], 'notes_acked', gone)
  redis.call('LTRIM', KEYS[2], gone, -1)
end
return {OK}
