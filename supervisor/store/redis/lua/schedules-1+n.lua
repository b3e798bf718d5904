-- Read every schedule record, with the store time; calls no write command, so that it
-- works while Redis refuses writes.
-- KEYS: 1 schedules set, then schedule:<name> of each name in ARGV
-- ARGV: the names, as the caller read them from the set just before
-- Returns: {OK, store time (ms), {name, {field, value, ...}}...} for the records found

local records = {}
for i, name in ipairs(ARGV) do
  local fields = redis.call('HGETALL', KEYS[i + 1])
  if #fields > 0 then
    records[#records + 1] = {name, fields}
  end
end
return {OK, fmt(store_now()), records}
