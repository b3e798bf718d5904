-- Read-only: some fields of many job hashes in one answer, for `snapshot` (the running
-- jobs that `status` lists): one reply for a batch, not one per job, so that the client
-- parses it at once (redis-py spends more per reply than Redis per HMGET).  It calls no
-- write command, so it runs while Redis refuses writes (see members-3.lua).  Callers
-- send a few hundred jobs per call, so that Redis is never held long.
-- KEYS: the job hashes
-- ARGV: the field names
-- Returns: {OK, {the fields' values of KEYS[1], in ARGV's order; nil where absent}, ...}
--          (all nil for a job hash that is gone)

local answer = {OK}
for i, name in ipairs(KEYS) do
  answer[i + 1] = redis.call('HMGET', name, unpack(ARGV))
end
return answer
