-- Queue a message for a live job.
-- KEYS: 1 job hash, 2 notes list
-- ARGV: 1 key, 2 payload (JSON text), 3 events channel
-- Returns: {OK} or {JOB_NOT_FOUND} (also for a finished job)

local f = redis.call('HMGET', KEYS[1], 'state', 'owner', 'notes_sent', 'notes_acked')
local state = f[1]
if state ~= 'pending' and state ~= 'running' then
  return {JOB_NOT_FOUND}
end
local queued = redis.call('RPUSH', KEYS[2], ARGV[2])
if f[3] then
  redis.call('HINCRBY', KEYS[1], 'notes_sent', 1)
else  -- a job from before notes_sent was kept: counted from its list
  redis.call('HSET', KEYS[1], 'notes_sent', tonumber(f[4] or '0') + queued)
end
if state == 'running' then
  ring(ARGV[3], f[2], 'n:' .. ARGV[1])  -- its holder's doorbell
end
return {OK}
