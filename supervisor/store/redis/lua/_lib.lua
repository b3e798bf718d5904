-- Helpers shared by every command script: redis/scripts.py prepends this file.
--
-- Times are store milliseconds with a microsecond fraction, read from Redis TIME.
-- Lua 5.1 prints numbers with 14 digits, so never tostring() or `..` a time: pass it
-- to redis.call as a number or format it with fmt().
--
-- `pool` tables, built by each script from its KEYS, name the pool-wide keys that
-- finish(), enqueue() and front_score() touch: pending, running, done_succeeded,
-- done_failed, done_stopped; `queues` (handler -> its queue key) and `reserved`
-- (supervisor -> its reservations key), the per-handler and per-supervisor keys the
-- script declared; plus now and retention (ms).  Only the scripts that find jobs while
-- they run (claim, members, upgrade-layout) also set `prefix`, from which the names of
-- keys they could not declare are built (see redis/keys.py for why that is safe).
--
-- Every pending job is in two zsets with the same score: the pool-wide `pending` (for
-- listing, counts and front_score) and its handler's `queue:<handler>` (for claiming),
-- so a backlog of one handler is never scanned by a claim for another.  A job released
-- for one supervisor (a move: `reserved_for` in its hash) is in a third,
-- `reserved:<supervisor>`, which that supervisor's claims read first; its score in all
-- three is `reserved_until`, so that other claims see it only once the reservation has
-- run out.  enqueue and dequeue are the only places that maintain these zsets; a
-- running job is in none of them.

local OK, JOB_EXISTS, JOB_NOT_FOUND, STALE_TOKEN, SUPERVISOR_ID_TAKEN, KEYS_CHANGED, STALE_TICK = 0, 1, 2, 3, 4, 5, 6

local function store_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

local function fmt(ms)
  return string.format('%.3f', ms)
end

-- An exclusive score bound, exact to the last bit.
local function after(ms)
  return string.format('(%.17g', ms)
end

-- Key names, for the scripts that find jobs while they run (pool.prefix); they mirror
-- supervisor/store/redis/keys.py.
local function job_key(prefix, key)
  return prefix .. 'job:' .. key
end

local function notes_key(prefix, key)
  return prefix .. 'notes:' .. key
end

local function queue_key(prefix, handler)
  return prefix .. 'queue:' .. handler
end

local function reserved_key(prefix, supervisor)
  return prefix .. 'reserved:' .. supervisor
end

-- A per-handler or per-supervisor key: declared in KEYS (the script's `declared` table),
-- or built from the prefix by the scripts that find their keys as they run (claim,
-- upgrade-layout).
local function declared_or_built(pool, declared, build, name, what)
  local key = declared[name]
  if key then
    return key
  end
  if not pool.prefix then
    error(what .. ' ' .. name .. ' was not declared in KEYS')
  end
  return build(pool.prefix, name)
end

-- The claim queue of a handler's jobs of one priority: the handler's name for
-- priority 0, handler:priority for 1 to 9 (handler names have no colon).
local function queue_id(handler, priority)
  priority = tonumber(priority or '0') or 0
  if priority > 0 then
    return handler .. ':' .. priority
  end
  return handler
end

local function queue_of(pool, id)
  return declared_or_built(pool, pool.queues, queue_key, id, 'the claim queue')
end

local function reserved_of(pool, supervisor)
  return declared_or_built(pool, pool.reserved, reserved_key, supervisor,
                           'the reservation set of')
end

-- What of a job hash says where it is queued: {handler, reserved_for, priority}, read
-- from the hash unless the caller already has them.
local function queued_as(job, known)
  if known then
    return known
  end
  local f = redis.call('HMGET', job, 'handler', 'reserved_for', 'priority')
  return {handler = f[1], reserved_for = f[2], priority = f[3]}
end

-- Add the job to the pending zsets (pool-wide, its handler's, and its reservation's if
-- the hash names one) at `score`.
local function enqueue(pool, job, key, score, known)
  local q = queued_as(job, known)
  redis.call('ZADD', pool.pending, score, key)
  redis.call('ZADD', queue_of(pool, queue_id(q.handler, q.priority)), score, key)
  if q.reserved_for then
    redis.call('ZADD', reserved_of(pool, q.reserved_for), score, key)
  end
end

-- Take the pending job out of the pending zsets; a reservation goes with it (claimed,
-- or ended).
local function dequeue(pool, job, key, known)
  local q = queued_as(job, known)
  redis.call('ZREM', pool.pending, key)
  if q.handler then
    redis.call('ZREM', queue_of(pool, queue_id(q.handler, q.priority)), key)
  end
  if q.reserved_for then
    redis.call('ZREM', reserved_of(pool, q.reserved_for), key)
    redis.call('HDEL', job, 'reserved_for', 'reserved_until', 'moved_from')
  end
end

-- The store took a write: last_ok = now, and ok_since = now if the last one is older
-- than `gap` ms (or unknown).
local function touch_health(health, now, gap)
  local last = redis.call('HGET', health, 'last_ok')
  if not last or now - tonumber(last) > gap then
    redis.call('HSET', health, 'ok_since', fmt(now))
  end
  redis.call('HSET', health, 'last_ok', fmt(now))
end

-- Is the job running under exactly this lease?
-- Notes are a list plus `notes_acked` in the job hash, the count of entries ever
-- removed from its head: the note at list index i (from 0) has seq notes_acked + i + 1.
-- `notes_sent` counts those ever added, so that a start or an end tells from the hash
-- whether the list exists; a job made before it was kept has none (then: EXISTS).
local function notes_acked(job)
  return tonumber(redis.call('HGET', job, 'notes_acked') or '0')
end

local function notes_waiting(sent, acked, notes)
  if not sent then
    return redis.call('EXISTS', notes) == 1
  end
  return tonumber(sent) > tonumber(acked or '0')
end

local function holds(job, token, owner)
  local f = redis.call('HMGET', job, 'state', 'token', 'owner')
  return f[1] == 'running' and f[2] == token and f[3] == owner
end

-- Under maxmemory, Redis refuses a script's writes only while none has run yet, and
-- only those that may grow memory (HSET, not DEL or ZREM).  A script whose first write
-- may be a deletion calls this before it with its `write-probe` key: SETRANGE of
-- nothing on a missing key is refused like any growing write, and otherwise changes
-- nothing.
local function refuse_when_full(probe)
  redis.call('SETRANGE', probe, 0, '')
end

-- Score that puts a job ahead of every pending job, and never in the future.
local function front_score(pool)
  local first = redis.call('ZRANGE', pool.pending, 0, 0, 'WITHSCORES')
  local oldest = pool.now
  if first[2] and tonumber(first[2]) < oldest then
    oldest = tonumber(first[2])
  end
  return oldest - 1
end

-- The running jobs counted, kept by every script that starts or ends a run, so that
-- `members` and the pool-wide limits read one small hash instead of every running job:
-- the hash named after pool.running, with fields owner NUL handler (for members),
-- handler, and handler NUL NUL group (for max_running and max_running_per_group).
local function load_key(pool)
  return pool.running .. '-load'
end

local function add_to(hash, field, delta)
  if redis.call('HINCRBY', hash, field, delta) <= 0 then
    redis.call('HDEL', hash, field)
  end
end

local function count_run(pool, owner, handler, group, delta)
  local load = load_key(pool)
  add_to(load, owner .. '\0' .. handler, delta)
  add_to(load, handler, delta)
  if group then
    add_to(load, handler .. '\0\0' .. group, delta)
  end
end

-- A running job leaves `running`: it no longer counts.  `known` as job_state's.
local function end_run(pool, job, key, known)
  local s = known
  if not s then
    local f = redis.call('HMGET', job, 'state', 'owner', 'handler', 'group')
    s = {state = f[1], owner = f[2], handler = f[3], group = f[4]}
  end
  if s.state == 'running' and s.owner and s.handler then
    count_run(pool, s.owner, s.handler, s.group, -1)
  end
  redis.call('ZREM', pool.running, key)
end

-- Make the job claimable at `score`, holding no lease.
local function requeue(pool, job, key, score)
  end_run(pool, job, key)
  redis.call('HSET', job, 'state', 'pending')
  redis.call('HDEL', job, 'lease_deadline', 'pid', 'rss_bytes', 'cpu_percent')
  enqueue(pool, job, key, score)
end

-- A job's history: the field `events` of its hash, one JSON object a line, oldest first,
-- of which the newest HISTORY_LIMIT are kept (`events_n` counts them); it goes with the
-- hash, and create_job's DEL starts a new one.  Each object: at (store ms, as text), e
-- (the event), s and t (the supervisor and token of the run it concerns), d (detail);
-- redis/records.py decodes them.  One string keeps a transition to one HMGET and one
-- HSET, at the cost of copying the history (a few KiB at most).
local HISTORY_LIMIT = POLICY.history_limit
local DETAIL_CHARS = POLICY.detail_chars

local function first_line(text)
  if not text then
    return nil
  end
  return string.sub(string.match(text, '^[^\n]*'), 1, DETAIL_CHARS)
end

-- What finish() and note_event() read of a job, in one HMGET.
local function job_state(job)
  local f = redis.call('HMGET', job, 'state', 'owner', 'token', 'handler', 'group',
                       'reserved_for', 'priority', 'events', 'events_n', 'notes_sent',
                       'notes_acked', 'output_runs')
  return {state = f[1], owner = f[2], token = f[3], handler = f[4], group = f[5],
          reserved_for = f[6], priority = f[7], events = f[8], events_n = f[9],
          notes_sent = f[10], notes_acked = f[11], output_runs = f[12]}
end

-- The history of job state `s` with `event` added at `now`: the text and count to
-- write.  While the job runs, the event names the owner and token of its run: a start
-- is noted once the job runs, every other change (an end, a release) before it is made.
local function history_with(s, now, event, detail)
  local entry = {at = fmt(now), e = event}
  if detail then
    entry.d = detail
  end
  if s.state == 'running' then
    entry.s, entry.t = s.owner, tonumber(s.token)
  end
  local text, n = s.events, tonumber(s.events_n or '0') + 1
  if text then
    text = text .. '\n' .. cjson.encode(entry)
  else
    text = cjson.encode(entry)
  end
  if n > HISTORY_LIMIT then
    text = string.sub(text, string.find(text, '\n', 1, true) + 1)
    n = n - 1
  end
  return text, n
end

-- Add `event` to the job's history at `now`.
local function note_event(job, now, event, detail)
  local text, n = history_with(job_state(job), now, event, detail)
  redis.call('HSET', job, 'events', text, 'events_n', n)
end

-- The first pid reported for a run goes into the detail of its start, if that is still
-- the newest event (a start followed by a stop before the first renewal keeps none).
local function note_pid(job, token, pid)
  local text = redis.call('HGET', job, 'events')
  if not text then
    return
  end
  local last, at = 1, string.find(text, '\n', 1, true)
  while at do
    last = at + 1
    at = string.find(text, '\n', last, true)
  end
  local entry = cjson.decode(string.sub(text, last))
  if entry.e == 'started' and entry.t == tonumber(token) then
    entry.d = (entry.d or '') .. ', pid ' .. pid
    redis.call('HSET', job, 'events', string.sub(text, 1, last - 1) .. cjson.encode(entry))
  end
end

-- A job's output (lua/append-output-3.lua): the hash `output:<key>` of its runs and an
-- `output-run:<token>:<key>` string per run.  Like load_key's, their names are built
-- here, from the job hash's (redis/keys.py PoolKeys.output and output_run build the
-- same), so that every script that creates or ends a job keeps them without declaring
-- them: they share the pool's hash tag (see redis/keys.py).
local function output_names(job, key)
  local prefix = string.sub(job, 1, #job - #key - #'job:')
  local runs = prefix .. 'output:' .. key
  local names = {runs}
  for _, token in ipairs(redis.call('HKEYS', runs)) do
    names[#names + 1] = prefix .. 'output-run:' .. token .. ':' .. key
  end
  return names
end

-- A new dispatch or a retry starts without the output of the runs before.
local function drop_output(job, key)
  redis.call('DEL', unpack(output_names(job, key)))
end

-- An ended job's output goes with its record, after `ms`.  `runs`: the job hash's
-- `output_runs`, the runs that kept output ('0': none, nothing to read; nil: a job
-- from before it was counted).
local function expire_output(job, key, ms, runs)
  if runs == '0' then
    return
  end
  local names = output_names(job, key)
  if #names == 1 then
    return  -- no run kept output: there is no hash of runs (an empty hash is no key)
  end
  for _, name in ipairs(names) do
    redis.call('PEXPIRE', name, ms)
  end
end

-- The channel on which the end of job `key` is announced, one per job so that only its
-- waiters hear it (`poolsup wait`; redis/keys.py PoolKeys.ended builds the same name).
local function ended_channel(pool, key)
  return string.sub(pool.running, 1, -(#'running' + 1)) .. 'ended:' .. key
end

-- Wake-ups go to one supervisor per claimable job, not to the pool.  A supervisor whose
-- claim left it room waits in `waiting:<handler>` of each handler it runs (a set); a
-- script that makes a job of `handler` claimable pops one of them and rings its
-- doorbell, the channel `<events channel>:<supervisor>`, on which the supervisor also
-- hears the stops, notes and debug requests of the jobs it holds (redis/keys.py
-- PoolKeys.waiting and doorbell build the same names).  A supervisor popped that dies
-- or freezes before it claims delays the job only to the next poll of the others.
local function waiting_key(pool, handler)
  return string.sub(pool.pending, 1, -(#'pending' + 1)) .. 'waiting:' .. handler
end

local function ring(channel, supervisor, hint)
  redis.call('PUBLISH', channel .. ':' .. supervisor, hint)
end

local function wake_waiting(pool, channel, handler, n)
  for _, supervisor in ipairs(redis.call('SPOP', waiting_key(pool, handler), n or 1)) do
    ring(channel, supervisor, 'w')
  end
end

-- The handler of a claim queue id (handler names have no colon).
local function handler_of(id)
  return string.match(id, '^[^:]*')
end

-- End the job in a final state: keep its record for the retention period, list it in
-- done_<state>, drop its notifications (`notes` false: the caller knows it has none),
-- note the end in its history (the first line of `error`, which is the reason of a
-- stop, as the detail).  `error` may be nil (left as it is) or false
-- (cleared); `result`, a completion's, is written with the state; `known` is the job's
-- job_state if the caller read it.  Only a pending job is dequeued (its handler's queue
-- and reservation must be in pool.queues and pool.reserved); a running one leaves
-- `running`.
local function finish(pool, job, notes, key, state, error, result, known)
  local s = known or job_state(job)
  local text, n = history_with(s, pool.now, state, first_line(error))
  if s.state == 'pending' then
    dequeue(pool, job, key, s)
  end
  end_run(pool, job, key, s)
  local written = {'state', state, 'finished_at', fmt(pool.now), 'events', text, 'events_n', n}
  if error then
    written[#written + 1], written[#written + 2] = 'error', error
  end
  if result then
    written[#written + 1], written[#written + 2] = 'result', result
  end
  redis.call('HSET', job, unpack(written))
  local dropped = {'lease_deadline', 'pid', 'rss_bytes', 'cpu_percent', 'notes_acked',
                   'notes_sent'}
  if error == false then
    dropped[#dropped + 1] = 'error'
  end
  redis.call('HDEL', job, unpack(dropped))
  redis.call('PEXPIRE', job, pool.retention)
  expire_output(job, key, pool.retention, s.output_runs)
  if notes then
    redis.call('DEL', notes)
  end
  local done = pool['done_' .. state]
  redis.call('ZADD', done, pool.now, key)
  -- Entries past the retention go now and then, not at every end (readers count and
  -- list by score, and drop an entry whose record is gone).
  if tonumber(s.token or '0') % POLICY.done_trim_every == 0 then
    redis.call('ZREMRANGEBYSCORE', done, '-inf', after(pool.now - pool.retention))
  end
  redis.call('PUBLISH', ended_channel(pool, key), state)
end

-- running -> succeeded with `result`, if `token` of `owner` still holds the job's
-- lease; whether it did, or had: a job that succeeded under this very lease was
-- completed by an earlier try whose reply was lost, and stays as it is.  pool needs
-- running, done_succeeded, now and retention.
local function complete_job(pool, job, notes, key, token, owner, result)
  local s = job_state(job)
  if s.token ~= token or s.owner ~= owner then
    return false
  end
  if s.state == 'succeeded' then
    return true
  end
  if s.state ~= 'running' then
    return false
  end
  -- Whether there are notes to drop, read before the first write (claim-10+n.lua).
  local has_notes = notes_waiting(s.notes_sent, s.notes_acked, notes)
  finish(pool, job, has_notes and notes, key, 'succeeded', false, result, s)
  return true
end

-- Create a pending job, replacing a finished record of the same key (r.replaces: the
-- caller found one) and dropping the notes, output and done-list entry left from it (a
-- done entry whose record is gone lies past the retention, where no reader counts it);
-- the caller checked that the key is not live.  Returns the fields written, as HGETALL
-- would answer them.  `r` is one request:
-- key, handler, payload, max_attempts, run_at (ms, or nil: now), schedule (or nil),
-- priority (0-9, or nil: 0), group (or nil), traceparent and tracestate (or nil),
-- job and notes (its keys), index (its schedule's job index, if it has one).  Due at
-- max(now, run_at).  pool needs pending, done_*, queues (the handler's) and now.
local function create_job(pool, r)
  local due = pool.now
  if r.run_at and r.run_at > due then
    due = r.run_at
  end
  if r.replaces then
    -- A record that is gone took its output and notes with it (both end no later).
    drop_output(r.job, r.key)
    redis.call('DEL', r.job, r.notes)
    redis.call('ZREM', pool.done_succeeded, r.key)
    redis.call('ZREM', pool.done_failed, r.key)
    redis.call('ZREM', pool.done_stopped, r.key)
  end
  local events = history_with({}, pool.now, 'dispatched', r.schedule)
  local fields = {
    'key', r.key, 'handler', r.handler, 'state', 'pending', 'payload', r.payload,
    'max_attempts', r.max_attempts, 'attempts', 0, 'token', 0, 'lease_losses', 0,
    'stop_requested', 0, 'created_at', fmt(pool.now), 'notes_sent', 0, 'output_runs', 0,
    'events', events, 'events_n', 1}
  local function also(name, value)
    fields[#fields + 1], fields[#fields + 2] = name, value
  end
  if r.run_at then
    also('run_at', fmt(r.run_at))
  end
  local priority = nil
  if r.priority and r.priority > 0 then
    priority = r.priority
    also('priority', r.priority)
  end
  if r.group then
    also('group', r.group)
  end
  if r.schedule then
    also('schedule', r.schedule)
  end
  if r.traceparent then
    also('traceparent', r.traceparent)
  end
  if r.tracestate then
    also('tracestate', r.tracestate)
  end
  redis.call('HSET', r.job, unpack(fields))
  if r.schedule then
    -- Scored by when the entry was last checked (prune-schedule-jobs rotates them).
    redis.call('ZADD', r.index, pool.now, r.key)
  end
  enqueue(pool, r.job, r.key, due, {handler = r.handler, priority = priority})
  return fields
end

-- '' (an absent optional argument) as nil.
local function optional(value)
  if value == '' then
    return nil
  end
  return value
end

-- A producer's plan writes only while its tick is current: the schedule's last fired
-- tick, fired by `owner`, with no outcome recorded since.  `tick` '' (no plan): always.
local function tick_is_current(record, tick, owner)
  if tick == '' then
    return true
  end
  local f = redis.call('HMGET', record, 'last_tick', 'fired_by', 'outcome')
  return f[1] ~= false and tonumber(f[1]) == tonumber(tick) and f[2] == owner
    and f[3] == 'fired'
end
