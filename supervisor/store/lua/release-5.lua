-- running -> pending without spending the attempt, ahead of every pending job; or
-- stopped if a stop was requested.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped
-- ARGV: 1 key, 2 token, 3 owner, 4 retention (ms), 5 events channel
-- Returns: {OK, state after the call} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
              now = store_now(), retention = tonumber(ARGV[4])}

if redis.call('HGET', job, 'stop_requested') == '1' then
  finish(pool, job, notes, key, 'stopped', 'stop requested; released by ' .. ARGV[3])
  return {OK, 'stopped'}
end
redis.call('HINCRBY', job, 'attempts', -1)
requeue(pool, job, key, front_score(pool))
redis.call('PUBLISH', ARGV[5], 'w')
return {OK, 'pending'}
