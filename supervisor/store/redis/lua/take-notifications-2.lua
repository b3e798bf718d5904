-- The queued messages of a job the lease holds whose seq is above `after`, oldest
-- first; nothing is removed (ack-notifications does that).
-- KEYS: 1 job hash, 2 notes list
-- ARGV: 1 token, 2 owner, 3 after (seq)
-- Returns: {OK, {seq, payload}...}; nothing for a lease not held

if not holds(KEYS[1], ARGV[1], ARGV[2]) then
  return {OK, {}}
end
local acked = notes_acked(KEYS[1])
local first = math.max(0, tonumber(ARGV[3]) - acked)
local notes = {}
for i, payload in ipairs(redis.call('LRANGE', KEYS[2], first, -1)) do
  notes[i] = {acked + first + i, payload}
end
return {OK, notes}
