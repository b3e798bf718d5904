-- Queue a message for a live job.
-- KEYS: 1 job hash, 2 notes list
-- ARGV: 1 key, 2 payload (JSON text), 3 events channel
-- Returns: {OK} or {JOB_NOT_FOUND} (also for a finished job)

local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'pending' and state ~= 'running' then
  return {JOB_NOT_FOUND}
end
redis.call('RPUSH', KEYS[2], ARGV[2])
if state == 'running' then
  ring(ARGV[3], redis.call('HGET', KEYS[1], 'owner'), 'n:' .. ARGV[1])  -- its holder's doorbell
end
return {OK}
