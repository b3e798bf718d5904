-- Set a schedule's last outcome and detail, only while the producer's tick is current:
-- its last fired tick, fired by this owner, no outcome recorded since (a plan applied,
-- the error it raised, or "released": given back unapplied, to be fired again); with
-- `end`, the schedule ends in the same step (lua/fire-tick-11.lua fires no more of its
-- ticks while its definition is the same).
-- KEYS: 1 schedule:<name> hash
-- ARGV: 1 tick (epoch seconds), 2 outcome, 3 detail (JSON text), 4 owner, 5 end ('1' or
--       '0')
-- Returns: {OK, 1 if recorded, 0 if the tick is no longer current}

if not tick_is_current(KEYS[1], ARGV[1], ARGV[4]) then
  return {OK, 0}
end
redis.call('HSET', KEYS[1], 'outcome', ARGV[2], 'detail', ARGV[3])
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'ended_at', fmt(store_now()), 'ended_tick', ARGV[1])
end
return {OK, 1}
