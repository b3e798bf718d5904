-- Set a schedule's last outcome and detail, only while the producer's tick is current:
-- its last fired tick, fired by this owner, no outcome recorded since (a plan applied,
-- the error it raised, or "released": given back unapplied, to be fired again).
-- KEYS: 1 schedule:<name> hash
-- ARGV: 1 tick (epoch seconds), 2 outcome, 3 detail (JSON text), 4 owner
-- Returns: {OK, 1 if recorded, 0 if the tick is no longer current}

if not tick_is_current(KEYS[1], ARGV[1], ARGV[4]) then
  return {OK, 0}
end
redis.call('HSET', KEYS[1], 'outcome', ARGV[2], 'detail', ARGV[3])
return {OK, 1}
