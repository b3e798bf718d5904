-- running -> pending without spending the attempt: ahead of every pending job, or
-- claimable after a delay, or (a move) held for one supervisor until a reservation runs
-- out; or stopped if a stop was requested.
-- KEYS: 1 job hash, 2 notes list, 3 pending zset, 4 running zset, 5 done:stopped,
--       6 queue:<handler> (of the job, as the caller read it: a held job's handler does
--       not change), 7 reserved:<target> (with no target, a name never written)
-- ARGV: 1 key, 2 token, 3 owner, 4 claim queue (handler, or handler:priority), 5 delay (ms; 0: at once, at the front),
--       6 retention (ms), 7 events channel, 8 supervisor to reserve it for ('': none;
--       the delay then does not apply), 9 reservation ttl (ms), 10 why (for the
--       history; '' if not known)
-- Returns: {OK, state after the call} or {STALE_TOKEN}

local job, notes, key = KEYS[1], KEYS[2], ARGV[1]
if not holds(job, ARGV[2], ARGV[3]) then
  return {STALE_TOKEN}
end
local target = ARGV[8]
local pool = {pending = KEYS[3], running = KEYS[4], done_stopped = KEYS[5],
              queues = {[ARGV[4]] = KEYS[6]}, reserved = {[target] = KEYS[7]},
              now = store_now(), retention = tonumber(ARGV[6])}
redis.call('EXISTS', load_key(pool))  -- undeclared: read before the first write

if redis.call('HGET', job, 'stop_requested') == '1' then
  finish(pool, job, notes, key, 'stopped', 'stop requested; released by ' .. ARGV[3])
  return {OK, 'stopped'}
end
redis.call('HINCRBY', job, 'attempts', -1)
local why = optional(ARGV[10])
if target ~= '' then
  note_event(job, pool.now, 'moved', 'to ' .. target .. (why and ': ' .. why or ''))
else
  note_event(job, pool.now, 'released', why)
end
local delay = tonumber(ARGV[5])
if target ~= '' then
  -- Its score everywhere is the end of the reservation: the target's claims find it
  -- in reserved:<target> before that, everyone's in the queues after.
  local reserved_until = pool.now + math.max(0, tonumber(ARGV[9]))
  redis.call('HSET', job, 'reserved_for', target, 'reserved_until', fmt(reserved_until),
             'moved_from', ARGV[3])
  requeue(pool, job, key, reserved_until)
elseif delay > 0 then
  requeue(pool, job, key, pool.now + delay)
else
  requeue(pool, job, key, front_score(pool))
end
if target ~= '' then
  ring(ARGV[7], target, 'w')
elseif delay <= 0 then
  wake_waiting(pool, ARGV[7], handler_of(ARGV[4]))
end
return {OK, 'pending'}
