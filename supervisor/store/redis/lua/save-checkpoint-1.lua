-- Keep the job's checkpoint, if the lease still holds it; later attempts get it from
-- claim, and only a new dispatch (which replaces the whole hash) drops it.
-- KEYS: 1 job hash
-- ARGV: 1 token, 2 owner, 3 checkpoint (JSON text)
-- Returns: {OK} or {STALE_TOKEN}

if not holds(KEYS[1], ARGV[1], ARGV[2]) then
  return {STALE_TOKEN}
end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[3], 'checkpoint_at', fmt(store_now()))
return {OK}
