-- Complete the jobs of freed slots if asked (each as complete-4 does), recover expired
-- leases of the pool, then claim up to `count` pending jobs of the
-- given handlers that are not paused, as far as their pool-wide limits allow: first
-- those released for this owner whose reservation has not run out (reserved:<owner>),
-- then due ones, highest priority first, oldest first within one, across their queues.
-- KEYS: 1 pending zset, 2 running zset, 3 token counter, 4 done:failed, 5 done:stopped,
--       6 write-probe, 7 reserved:<owner>, 8 health hash, 9 last-claim:<owner>,
--       10 epoch hash, 11... queue:<handler> of each handler in ARGV 1's `handlers`
-- ARGV: 1 the owner's settings, the same at each of its claims (JSON, sent pre-encoded):
--         {prefix: key prefix, owner, ttl: lease ttl (ms), max_losses: max lease losses
--          (0: no limit), retention (ms), channel: events channel, min_failing_span:
--          the shortest span of failed or unanswered calls that is a failing window
--          (ms), min_claim_gap: the shortest gap between two claims of the pool that
--          leaves the leases that ended in it to a witness (ms), judge_after_gap: for
--          how long after the gap (ms), lock_delay: true (the lock-delay after a master
--          change; false only in tests that show it is needed), handlers: [the
--          handlers this owner runs]}
--       2 this claim (JSON): {count, complete: [[key, token, result text], ...] the jobs
--          to complete, since: since when the owner's calls have failed or gone
--          unanswered (store ms; absent if unknown), id: this claim's id ('' for none),
--          claim_by: the store time after which it hands out no job (absent for none: a
--          claim held up that long, by a frozen store, may come after its sender
--          stopped), limits: the pool-wide limits of the handlers that have any (see
--          below; {} for none), again: true when this claim is sent again under the
--          id of one whose reply was lost (only then is the last claim read), settle:
--          true for completions alone (count 0: see below), recover: false for a
--          claim that recovers no expired lease (the claimer's between its polls)}
-- Undeclared keys (found while it runs, so not known to the caller; built from the
-- prefix): paused (handlers, or '*' for the pool, that no claim serves), the claim
-- queues of priorities 1-9 (queue:<handler>:<priority>), starts:<handler> (the store
-- times of a rate-limited handler's starts within its period), running-load, the job
-- hash and notes list of each job it completes, recovers or claims, the queue of
-- a recovered job whose handler this owner does not run, and the reservations of
-- another supervisor that a claimed job's run-out reservation still names, and the
-- waiting sets of its handlers (waiting:<handler>, written last).  Each job's
-- undeclared keys are all read before the first write for that job, so that a key
-- moved away by a resharding fails the script between jobs, never halfway through one.
-- Returns: {OK, recovered, next due in (ms; of these handlers' jobs) or false,
--           store time (ms),
--           {key, handler, payload, token, attempt, max_attempts, lease deadline,
--            has notes (0/1), checkpoint or false, lease_expired_at (ms) or false,
--            traceparent or false, tracestate or false}...},
--           completed: per job to complete 1, or 0 (stale lease), replayed (1/0),
--           {key, holder, counted (1/0), losses in a row, 'requeued'|'failed'|'stopped'}
--           for each lease recovered, how many expired leases were left to a witness,
--           until when claims are held after a change of master (ms) or false}
-- The master change (core/failover.py, whose docstring has the argument): the master's
-- identity is read here, with INFO, atomically with the claim.  While the hold lasts,
-- the claim completes jobs but hands out none and recovers no expired lease.
-- A settle (this.settle) only completes its jobs, at the cost of their own writes: it
-- recovers nothing, reads no epoch, queue or pause, notes no claim and changes no waiting
-- set (the claimer sends one while its last claim left it waiting for work).
-- A claim sent again with the id of the owner's last claim (its reply was lost) claims
-- nothing anew: it answers the jobs that claim handed out which the owner still holds
-- (recovered 0, next due unknown), and whether it completed its job.  The last claim's
-- id and jobs are kept in last-claim:<owner> for two lease ttls, when it handed out or
-- completed any (one that did neither, run again, does what it did).
-- A recovered job keeps its expired deadline as `lease_expired_at` (for the failover
-- time) until a claim hands it out and clears it.
-- A lease that ended while this owner saw the store failing (the failing window
-- [since, now], if at least min_failing_span long) is recovered without counting a loss: the
-- store's outage ended it, not the job.  A lease that this claim would count but that
-- ended inside the last gap between the pool's claims (nobody reached the store: the
-- health hash keeps last_claim, gap_start, gap_end), or within a lease ttl after it, is
-- left running for a claim that witnessed the gap, until judge_after_gap after the later of the
-- gap's end and the lease's.  The rule is
-- core/lease_losses.py's, from include/lease_losses.lua:
-- include lease_losses

local RECOVER_BATCH = POLICY.recover_batch

local settings, this = cjson.decode(ARGV[1]), cjson.decode(ARGV[2])
local prefix, owner = settings.prefix, settings.owner
local count, ttl = this.count, settings.ttl
local asked = count
local claim_by = this.claim_by
local max_losses = settings.max_losses
local pool = {pending = KEYS[1], running = KEYS[2], done_failed = KEYS[4],
              done_stopped = KEYS[5], queues = {}, reserved = {[owner] = KEYS[7]},
              prefix = prefix, now = store_now(), retention = settings.retention,
              done_succeeded = prefix .. 'done:succeeded'}
local handlers, FIRST_QUEUE = settings.handlers, 11
for i, handler in ipairs(handlers) do
  pool.queues[handler] = KEYS[FIRST_QUEUE + i - 1]
end

refuse_when_full(KEYS[6])

local function complete_all()
  local completed = {}
  for _, c in ipairs(this.complete) do
    local key = c[1]
    local job, notes = job_key(prefix, key), notes_key(prefix, key)
    completed[#completed + 1] = complete_job(pool, job, notes, key, c[2], owner, c[3])
                                and 1 or 0
  end
  return completed
end
if this.settle then
  return {OK, 0, false, fmt(pool.now), {}, complete_all(), 0, {}, 0, false}
end

if claim_by and pool.now > claim_by then
  count = 0
end

-- core/failover.py step_epoch; returns the hold's end (ms) or nil.
local FAILOVER_MARGIN, TOKEN_EPOCH = POLICY.failover_margin_ms, POLICY.token_epoch
local function master_identity()
  local info = redis.pcall('INFO', 'server', 'replication')  -- one call from Redis 7
  if type(info) ~= 'string' or not string.find(info, 'master_replid:', 1, true) then
    info = redis.call('INFO', 'server') .. redis.call('INFO', 'replication')
  end
  return string.match(info, 'run_id:(%x+)') .. ':' .. string.match(info, 'master_replid:(%x+)')
end

local function step_epoch(epoch, token, running, now, lease_ttl)
  local f = redis.call('HMGET', epoch, 'master', 'number', 'seen_at', 'max_ttl')
  local master = master_identity()
  if f[1] == master then
    local seen_at, max_ttl = tonumber(f[3] or ''), tonumber(f[4])
    if lease_ttl > max_ttl then
      max_ttl = lease_ttl
      redis.call('HSET', epoch, 'max_ttl', max_ttl)
    end
    return seen_at and seen_at + max_ttl + FAILOVER_MARGIN
  end
  if not f[1] and redis.call('EXISTS', token, running) == 0 then
    redis.call('HSET', epoch, 'master', master, 'number', 1, 'max_ttl', lease_ttl)
    return nil
  end
  local number = (tonumber(f[2] or '') or 0) + 1
  local max_ttl = math.max(tonumber(f[4] or '') or 0, lease_ttl)
  redis.call('HSET', epoch, 'master', master, 'number', number, 'seen_at', fmt(now),
             'max_ttl', max_ttl)
  local floor = number * TOKEN_EPOCH
  if tonumber(redis.call('GET', token) or '0') < floor then
    redis.call('SET', token, string.format('%d', floor))
  end
  return now + max_ttl + FAILOVER_MARGIN
end

local hold_until = step_epoch(KEYS[10], KEYS[3], pool.running, pool.now, ttl)
local held = hold_until ~= nil and pool.now < hold_until and settings.lock_delay
if held then
  count = 0
end

local claim_id, last_claim = this.id, KEYS[9]
if claim_id ~= '' and this.again then
  local last = redis.call('GET', last_claim)
  local saved = last and cjson.decode(last)
  if saved and saved.id == claim_id then
    local again = {}
    for _, held in ipairs(saved.jobs) do
      local key, token = held[1], held[2]
      local f = redis.call('HMGET', job_key(prefix, key), 'state', 'token', 'owner', 'handler',
                           'payload', 'attempts', 'max_attempts', 'lease_deadline',
                           'checkpoint', 'traceparent', 'tracestate')
      if f[1] == 'running' and f[2] == token and f[3] == owner then
        again[#again + 1] = {key, f[4], f[5], tonumber(token), tonumber(f[6]), f[7], f[8],
                             redis.call('EXISTS', notes_key(prefix, key)), f[9], false,
                             f[10], f[11]}
      end
    end
    return {OK, 0, false, fmt(pool.now), again, saved.completed, 1, {}, 0,
            held and fmt(hold_until)}
  end
end
-- core/lease_losses.py write_gap: this claim ends the gap since the pool's last one;
-- claim_note_due: it writes itself down only now and then, not at every claim.
local function claims_gap(health, now, min_gap)
  local f = redis.call('HMGET', health, 'last_claim', 'gap_start', 'gap_end')
  local last = tonumber(f[1] or '')
  if last and now - last >= min_gap then
    redis.call('HSET', health, 'last_claim', fmt(now), 'gap_start', fmt(last),
               'gap_end', fmt(now))
    return {start = last, finish = now}
  end
  if claim_note_due(last, now, nil, settings.claim_note_every) then
    redis.call('HSET', health, 'last_claim', fmt(now))
  end
  if f[2] and f[3] then
    return {start = tonumber(f[2]), finish = tonumber(f[3])}
  end
  return nil
end
local gap = claims_gap(KEYS[8], pool.now, settings.min_claim_gap)

local completed = complete_all()
local failing = failing_window(this.since, pool.now, settings.min_failing_span)
local defer = settings.judge_after_gap

local recovered, requeued, judged, left = 0, {}, {}, 0
local expired = {}
if not held and this.recover ~= false then
  expired = redis.call('ZRANGEBYSCORE', pool.running, '-inf', pool.now,
                       'LIMIT', 0, RECOVER_BATCH)
end
for _, key in ipairs(expired) do
  local job, notes = job_key(prefix, key), notes_key(prefix, key)
  local f = redis.call('HMGET', job, 'state', 'stop_requested', 'owner', 'handler',
                       'lease_deadline', 'priority')
  local holder = f[3] or '?'
  if f[1] ~= 'running' then
    redis.call('ZREM', pool.running, key)
  elseif judged_later(tonumber(f[5] or ''), failing, gap, pool.now, ttl, defer) then
    left = left + 1  -- left running for a witness: nothing of it is written
  else
    redis.call('EXISTS', notes, queue_of(pool, queue_id(f[4] or '', f[6])), load_key(pool))
    recovered = recovered + 1
    local losses
    -- core/failover.py ended_by_failover: not counted either.
    local lease_end = tonumber(f[5] or '')
    local by_failover = ended_by_failover(lease_end, hold_until)
    local counted = loss_counts(lease_end, failing) and not by_failover
    if counted then
      losses = redis.call('HINCRBY', job, 'lease_losses', 1)
    else
      losses = tonumber(redis.call('HGET', job, 'lease_losses') or '0')
    end
    local outcome = 'requeued'
    if f[2] == '1' then
      outcome = 'stopped'
    elseif max_losses > 0 and losses >= max_losses then
      outcome = 'failed'
    end
    note_event(job, pool.now, 'lease_lost', string.format('%s (%d in a row); %s',
      counted and 'counted'
        or by_failover and "not counted: the store's master changed"
        or 'not counted: the store was failing', losses, outcome))
    if outcome == 'stopped' then
      finish(pool, job, notes, key, 'stopped', 'stop requested; lease of ' .. holder .. ' expired')
    elseif outcome == 'failed' then
      finish(pool, job, notes, key, 'failed', string.format(
        'lease lost %d times (limit %d), last held by %s', losses, max_losses, holder))
    else
      redis.call('HINCRBY', job, 'attempts', -1)
      if f[5] then
        redis.call('HSET', job, 'lease_expired_at', f[5])
      end
      requeue(pool, job, key, front_score(pool))
      requeued[f[4] or ''] = true
    end
    judged[#judged + 1] = {key, holder, counted and 1 or 0, losses, outcome}
  end
end

-- core/limits.py startable: the pool-wide limits of the handlers that have any, from
-- ARGV 2's limits: {handler: [max_running, max_running_per_group, rate starts, rate period (ms)]}
-- (-1 where none); running counts from running-load, starts from starts:<handler>.
local limits = {}
for handler, l in pairs(this.limits) do
  limits[handler] = {max_running = l[1] >= 0 and l[1] or nil,
                     per_group = l[2] >= 0 and l[2] or nil,
                     rate = l[3] >= 0 and l[3] or nil, period = l[4]}
end
local load = load_key(pool)

local function starts_key(handler)
  return prefix .. 'starts:' .. handler
end

local function running_count(field)
  return tonumber(redis.call('HGET', load, field) or '0')
end

-- The start of one more job of `handler` in `group` stays within its limits.
local function allowed(handler, group)
  local l = limits[handler]
  if not l then
    return true
  end
  if l.max_running and running_count(handler) >= l.max_running then
    return false
  end
  if l.per_group and group and running_count(handler .. '\0\0' .. group) >= l.per_group then
    return false
  end
  if l.rate then
    local starts = starts_key(handler)
    redis.call('ZREMRANGEBYSCORE', starts, '-inf', pool.now - l.period)
    if redis.call('ZCARD', starts) >= l.rate then
      return false
    end
  end
  return true
end

-- The handlers this claim serves: not paused (one paused pool serves none), each with
-- its claim queues, highest priority first.
local paused = {}
local paused_fields = redis.call('HKEYS', prefix .. 'paused')
for _, name in ipairs(paused_fields) do
  paused[name] = true
end
if paused['*'] then
  count = 0
end
local serves, handler_queues, higher = {}, {}, {}
for _, handler in ipairs(handlers) do
  if not paused[handler] then
    serves[handler] = true
    for priority = 9, 1, -1 do
      higher[#higher + 1] = {handler = handler, priority = priority,
                             key = queue_of(pool, queue_id(handler, priority))}
    end
  end
end
-- The queues of priorities 1-9, and this owner's reservations, are read only when one
-- of them exists (an empty zset does not): one EXISTS for them all, where most pools
-- use no priority and move no job.
local any_higher, any_reserved = false, false
local names = {KEYS[7]}
for _, queue in ipairs(higher) do
  names[#names + 1] = queue.key
end
if redis.call('EXISTS', unpack(names)) > 0 then
  any_reserved = redis.call('EXISTS', KEYS[7]) == 1
  any_higher = not any_reserved or (#higher > 0 and
                                    redis.call('EXISTS', unpack(names, 2)) > 0)
end
for _, queue in ipairs(higher) do
  if any_higher then
    handler_queues[#handler_queues + 1] = queue
  end
  if queue.priority == 1 then
    handler_queues[#handler_queues + 1] = {handler = queue.handler, priority = 0,
                                           key = queue_of(pool, queue.handler)}
  end
end

-- When a job of these handlers is next due, or a rate-limited one may start.
local next_due = false
local function due_in(wait)
  if not next_due or wait < next_due then
    next_due = wait
  end
end

-- Due jobs across the queues: highest priority first, then oldest, ties broken by key
-- as in one zset.  From each queue its first `count` and one more (a job left for
-- another supervisor to wake for), more where a group limit may skip some; the first
-- one not yet due says when the queue is next due.
local GROUP_SCAN = POLICY.group_scan
local function due_jobs()
  local due = {}
  for _, queue in ipairs(handler_queues) do
    local wanted = count + 1
    if limits[queue.handler] and limits[queue.handler].per_group then
      wanted = count + GROUP_SCAN
    end
    local found = redis.call('ZRANGE', queue.key, 0, wanted - 1, 'WITHSCORES')
    for i = 1, #found, 2 do
      local score = tonumber(found[i + 1])
      if score > pool.now then
        due_in(score - pool.now)
        break
      end
      due[#due + 1] = {key = found[i], score = score, queue = queue.key,
                       priority = queue.priority, handler = queue.handler}
    end
  end
  table.sort(due, function(a, b)
    if a.priority ~= b.priority then
      return a.priority > b.priority
    end
    if a.score ~= b.score then
      return a.score < b.score
    end
    return a.key < b.key
  end)
  return due
end

local claimed = {}
local deadline = pool.now + ttl

local function start_attempt(key, job, f)
  -- Read before any write: the notes, and a run-out reservation for someone else.
  local has_notes = notes_waiting(f[15], f[16], notes_key(prefix, key)) and 1 or 0
  if f[6] then
    redis.call('EXISTS', reserved_of(pool, f[6]))
  end
  count_run(pool, owner, f[2], f[8], 1)  -- the first write: running-load is undeclared
  local token = redis.call('INCR', KEYS[3])
  if limits[f[2]] and limits[f[2]].rate then
    redis.call('ZADD', starts_key(f[2]), pool.now, token)
    redis.call('PEXPIRE', starts_key(f[2]), limits[f[2]].period)
  end
  local attempt = tonumber(f[10] or '0') + 1
  local events, n = history_with({state = 'running', owner = owner, token = token,
                                  events = f[11], events_n = f[12]},
                                 pool.now, 'started', 'attempt ' .. attempt)
  redis.call('HSET', job, 'state', 'running', 'owner', owner, 'token', token,
             'started_at', fmt(pool.now), 'lease_deadline', fmt(deadline),
             'attempts', attempt, 'events', events, 'events_n', n)
  if f[7] then  -- a pending job holds no stats; only a recovered one this
    redis.call('HDEL', job, 'lease_expired_at')
  end
  dequeue(pool, job, key, {handler = f[2], reserved_for = f[6], priority = f[9]})
  redis.call('ZADD', pool.running, deadline, key)
  claimed[#claimed + 1] = {key, f[2], f[3], token, attempt, f[4], fmt(deadline), has_notes,
                           f[5], f[7], f[13], f[14]}
end

local FIELDS = {'state', 'handler', 'payload', 'max_attempts', 'checkpoint', 'reserved_for',
                'lease_expired_at', 'group', 'priority', 'attempts', 'events', 'events_n',
                'traceparent', 'tracestate', 'notes_sent', 'notes_acked'}

-- Moves to this owner first.  Only the live reservations are read (their jobs score
-- later than now), and they are few: each runs out after its reservation ttl.
if count > 0 and any_reserved then
  local reserved = KEYS[7]
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', reserved, after(pool.now), '+inf')) do
    if #claimed >= count then
      break
    end
    local job = job_key(prefix, key)
    local f = redis.call('HMGET', job, unpack(FIELDS))
    if f[1] ~= 'pending' or f[6] ~= owner then
      redis.call('ZREM', reserved, key)  -- left behind; never expected
    elseif serves[f[2]] and allowed(f[2], f[8]) then
      start_attempt(key, job, f)
    end
  end
end

local left_due  -- the handler of a due job this claim had no room for
if count > #claimed then
  for _, entry in ipairs(due_jobs()) do
    if #claimed >= count then
      left_due = entry.handler
      break
    end
    local key = entry.key
    local job = job_key(prefix, key)
    local f = redis.call('HMGET', job, unpack(FIELDS))
    if f[1] ~= 'pending' or queue_of(pool, queue_id(f[2], f[9])) ~= entry.queue then
      redis.call('ZREM', entry.queue, key)  -- left behind; never expected
    elseif allowed(f[2], f[8]) then
      start_attempt(key, job, f)
    end
  end
end

-- When a rate-limited handler may start again.
for _, queue in ipairs(handler_queues) do
  local l = limits[queue.handler]
  if l and l.rate and queue.priority == 0 then
    local starts = redis.call('ZRANGE', starts_key(queue.handler), 0, 0, 'WITHSCORES')
    if starts[2] and redis.call('ZCARD', starts_key(queue.handler)) >= l.rate then
      due_in(math.max(0, tonumber(starts[2]) + l.period - pool.now))
    end
  end
end
if next_due then
  next_due = fmt(next_due)
end
-- Waiting for work (_lib.lua wake_waiting): while this claim left it room; a job it had
-- no room for, or a recovered one of a handler it does not serve, wakes another.
for _, handler in ipairs(handlers) do
  redis.call(asked > #claimed and 'SADD' or 'SREM', waiting_key(pool, handler), owner)
end
if left_due then
  wake_waiting(pool, settings.channel, left_due)
end
for handler in pairs(requeued) do
  if not serves[handler] then
    wake_waiting(pool, settings.channel, handler)
  end
end
if claim_id ~= '' and (#claimed > 0 or #completed > 0) then
  local held = {}
  for _, job in ipairs(claimed) do
    held[#held + 1] = {job[1], tostring(job[4])}
  end
  redis.call('SET', last_claim, cjson.encode({id = claim_id, jobs = held, completed = completed}),
             'PX', math.max(2 * ttl, 1000))
end
return {OK, recovered, next_due, fmt(pool.now), claimed, completed, 0, judged, left,
        held and fmt(hold_until)}
