-- The SQLite store's own statements, one per named section (sqlite/schema.py
-- load_queries), beside those both SQL stores run as they are (store/sql/queries.sql).
-- Parameters are named.  Every statement is scoped to :pool.  Two clocks, both read
-- inside the transaction: :now is wall-clock epoch seconds (what users read, and
-- `due`), :boot is CLOCK_BOOTTIME seconds (lease deadlines, supervisors' last_seen).
-- A boot-clock deadline is shown to users as :now + (deadline - :boot).
-- The semantics mirror the Redis store's scripts in lua/.

-- name: take_tokens
-- Reserves :n tokens; returns the last one.
UPDATE counters SET token = token + :n WHERE pool = :pool RETURNING token;

-- name: front_of_queue
-- A due time ahead of every pending job, and never in the future.
SELECT min(coalesce(min(due), :now), :now) - 1 FROM jobs
WHERE pool = :pool AND state = 'pending';

-- name: drop_expired_records
DELETE FROM jobs WHERE pool = :pool AND finished_at < :cutoff;

-- name: emit_event
INSERT INTO events (pool, kind, key, at) VALUES (:pool, :kind, :key, :now);

-- name: trim_events
DELETE FROM events WHERE pool = :pool AND at < :cutoff;

-- name: last_event_id
SELECT coalesce(max(id), 0) FROM events;

-- name: events_after
SELECT id, kind, key FROM events WHERE pool = :pool AND id > :after ORDER BY id LIMIT 1000;

-- name: all_jobs
SELECT * FROM jobs WHERE pool = :pool ORDER BY created_at, rowid;

-- name: jobs_in_state
SELECT * FROM jobs WHERE pool = :pool AND state = :state ORDER BY created_at, rowid;

-- name: jobs_page
-- One page of the listing by key, on the (pool, key) index; `upper` bounds the prefix's range.
SELECT * FROM jobs
WHERE pool = :pool AND key > :after AND key >= :prefix AND key < :upper
  AND substr(key, 1, length(:prefix)) = :prefix
  AND (:state IS NULL OR state = :state)
  AND (finished_at IS NULL OR finished_at >= :cutoff)
ORDER BY key LIMIT :limit;

-- name: latest_finished
SELECT * FROM jobs
WHERE pool = :pool AND state = :state AND finished_at >= :cutoff
ORDER BY finished_at DESC, rowid DESC LIMIT :limit;

-- name: running_jobs
SELECT * FROM jobs WHERE pool = :pool AND state = 'running' ORDER BY started_at, rowid;

-- name: moving_jobs
-- Pending jobs whose reservation has not run out.
SELECT * FROM jobs INDEXED BY jobs_reserved
WHERE pool = :pool AND state = 'pending' AND reserved_for IS NOT NULL
    AND reserved_until > :now
ORDER BY created_at, rowid;

-- name: state_counts
-- Jobs per state, less the finished records past the retention period that no write
-- has dropped yet (:cutoff): those are few and found through jobs_finished, so that the
-- count of every state reads the jobs_by_state index alone.  Read-only.
SELECT state, count(*) AS n FROM jobs WHERE pool = :pool GROUP BY state
UNION ALL
SELECT state, -count(*) FROM jobs WHERE pool = :pool AND finished_at < :cutoff
GROUP BY state;

-- name: insert_job
-- Replaces a finished record of the key (the caller checked that it is not live).
-- Due at :run_at (wall clock, like every `due`), or now if it is NULL or past.
INSERT OR REPLACE INTO jobs
    (pool, key, handler, state, max_attempts, payload, created_at, due, run_at, schedule,
     priority, job_group, traceparent, tracestate)
VALUES (:pool, :key, :handler, 'pending', :max_attempts, :payload, :now,
    max(:now, coalesce(:run_at, :now)), :run_at, :schedule, :priority, :job_group,
    :traceparent, :tracestate);

-- name: job_finished_at
SELECT state, finished_at FROM jobs
WHERE pool = :pool AND key = :key AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: pending_count
SELECT count(*) FROM jobs INDEXED BY jobs_queue WHERE pool = :pool AND state = 'pending';

-- name: running_counts
-- Running jobs of the handlers in :handlers, per handler and dispatch group, for
-- core/limits.py (a crashed supervisor's jobs count until their leases are recovered).
SELECT handler, job_group, count(*) AS running FROM jobs INDEXED BY jobs_leases
WHERE pool = :pool AND state = 'running' AND handler IN (SELECT value FROM json_each(:handlers))
GROUP BY handler, job_group;

-- name: claim_gap
SELECT last_claim, gap_start, gap_end FROM claim_gaps WHERE pool = :pool;

-- name: note_claim
-- A claim ran at :boot; :gap_start, :gap_end the last gap between claims (NULL: keep).
INSERT INTO claim_gaps (pool, last_claim, gap_start, gap_end)
VALUES (:pool, :boot, :gap_start, :gap_end)
ON CONFLICT (pool) DO UPDATE SET last_claim = :boot,
    gap_start = coalesce(:gap_start, gap_start), gap_end = coalesce(:gap_end, gap_end);

-- name: expired_leases
-- The running jobs whose lease ran out: sql/leases.py recover_expired_leases decides
-- each one's recovery (core/lease_losses.py).
SELECT key, handler, supervisor, lease_deadline, lease_losses, stop_requested FROM jobs INDEXED BY jobs_leases
WHERE pool = :pool AND state = 'running' AND lease_deadline < :boot
ORDER BY lease_deadline;

-- name: fail_expired_lease
UPDATE jobs SET state = 'failed', lease_losses = :losses, finished_at = :now,
    error = printf('lease lost %d times (limit %d), last held by %s', :losses,
                   :max_lease_losses, coalesce(supervisor, '?')),
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: requeue_expired_lease
-- Back to pending without spending the attempt, in front of the queue, keeping the
-- expired deadline; one of 0 was set when the file was opened after a reboot
-- (sqlite_schema._check_boot) and says nothing about when the lease ran out.
UPDATE jobs SET state = 'pending', lease_losses = :losses, attempts = attempts - 1,
    due = :due, lease_expired_at = nullif(lease_deadline, 0), lease_deadline = NULL,
    pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: reserved_keys
-- The jobs released for :owner (moves) whose reservation has not run out, claimed
-- before any other: their `due` is the end of the reservation, so claimable_keys
-- leaves them to it until then.  lease_expired_at is read here because start_attempt
-- clears it and RETURNING shows the row after the update.
SELECT key, handler, job_group, lease_expired_at FROM jobs INDEXED BY jobs_reserved
WHERE pool = :pool AND state = 'pending' AND reserved_for = :owner AND reserved_until > :now
    AND handler IN (SELECT value FROM json_each(:handlers))
ORDER BY reserved_until, rowid
LIMIT :count;

-- name: claimable_keys
-- The per-handler index, so that a backlog of other handlers' jobs is never scanned.
SELECT key, handler, job_group, lease_expired_at FROM jobs INDEXED BY jobs_queue_by_priority
WHERE pool = :pool AND state = 'pending' AND due <= :now
    AND handler IN (SELECT value FROM json_each(:handlers))
ORDER BY priority DESC, due, rowid
LIMIT :count;

-- name: start_attempt
UPDATE jobs SET state = 'running', supervisor = :owner, token = :token,
    attempts = attempts + 1, started_at = :now, lease_deadline = :boot + :lease_ttl,
    due = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL, lease_expired_at = NULL,
    reserved_for = NULL, reserved_until = NULL, moved_from = NULL
WHERE pool = :pool AND key = :key
RETURNING key, handler, payload, token, attempts, max_attempts, lease_deadline, checkpoint,
    traceparent, tracestate,
    EXISTS (SELECT 1 FROM notes WHERE notes.pool = :pool AND notes.key = :key) AS has_notes;

-- name: after_claim
-- The next due time of :handlers after a claim (PostgreSQL's also notes who waits).
SELECT min(due) FROM jobs
WHERE pool = :pool AND state = 'pending' AND due > :now
    AND handler IN (SELECT value FROM json_each(:handlers));

-- name: complete_job
UPDATE jobs SET state = 'succeeded', result = :result, error = NULL, finished_at = :now,
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token;

-- name: succeeded_under
SELECT 1 FROM jobs WHERE pool = :pool AND key = :key AND state = 'succeeded'
    AND supervisor = :owner AND token = :token;

-- name: member_load
-- The running jobs of each owner per handler, and (handler NULL) the pending jobs whose
-- live reservation names each supervisor.
SELECT supervisor AS id, handler, count(*) AS n FROM jobs
WHERE pool = :pool AND state = 'running'
GROUP BY supervisor, handler
UNION ALL
SELECT reserved_for, NULL, count(*) FROM jobs INDEXED BY jobs_reserved
WHERE pool = :pool AND state = 'pending' AND reserved_for IS NOT NULL
    AND reserved_until > :now
GROUP BY reserved_for;

-- name: drop_silent_supervisors
-- Only entries so long silent that they are garbage: a stalled supervisor must still
-- find its entry when it wakes up.
DELETE FROM supervisors
WHERE pool = :pool AND :boot - last_seen > max(:live_ttls * lease_ttl, :garbage_after);

-- name: live_keys_of_schedule
SELECT key FROM jobs INDEXED BY jobs_by_schedule
WHERE pool = :pool AND schedule = :schedule AND state IN ('pending', 'running')
ORDER BY key;

-- name: note_job_event
-- A step of the job's history (sql/history.py), naming the supervisor and token of
-- its run while it runs; with an :owner, only while its lease (:token) holds the job.
-- Then the job keeps its newest :keep events (two statements: sqlite/tx.py runs each).
INSERT INTO job_events (pool, key, at, event, supervisor, token, detail)
SELECT :pool, :key, :now, :event, CASE WHEN state = 'running' THEN supervisor END,
    CASE WHEN state = 'running' THEN token END, :detail
FROM jobs WHERE pool = :pool AND key = :key
    AND (:owner IS NULL OR (state = 'running' AND supervisor = :owner AND token = :token));
DELETE FROM job_events WHERE pool = :pool AND key = :key AND id <= (
    SELECT id FROM job_events WHERE pool = :pool AND key = :key
    ORDER BY id DESC LIMIT 1 OFFSET :keep);

-- name: forget_job_events
DELETE FROM job_events WHERE pool = :pool AND key = :key;

-- name: fill_start_pid
-- The run's first pid, while its start is the newest event and no pid is stored yet.
UPDATE job_events SET detail = detail || ', pid ' || :pid
WHERE id = (SELECT max(id) FROM job_events WHERE pool = :pool AND key = :key)
    AND event = 'started' AND token = :token
    AND EXISTS (SELECT 1 FROM jobs WHERE pool = :pool AND key = :key AND token = :token
                AND supervisor = :owner AND state = 'running' AND pid IS NULL);

-- name: job_events
SELECT key, at, event, supervisor, token, detail FROM job_events
WHERE pool = :pool AND key = :key ORDER BY id;

-- name: all_job_events
SELECT key, at, event, supervisor, token, detail FROM job_events
WHERE pool = :pool ORDER BY id;

-- name: live_among
-- Which of :keys (a JSON array) are live (pending or running).
SELECT key FROM jobs
WHERE pool = :pool AND key IN (SELECT value FROM json_each(:keys))
    AND state IN ('pending', 'running');
