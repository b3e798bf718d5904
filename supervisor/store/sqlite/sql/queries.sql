-- The SQLite store's statements, one per named section (sqlite_schema.load_queries).
-- Parameters are named.  Every statement is scoped to :pool.  Two clocks, both read
-- inside the transaction: :now is wall-clock epoch seconds (what users read, and
-- `due`), :boot is CLOCK_BOOTTIME seconds (lease deadlines, supervisors' last_seen).
-- A boot-clock deadline is shown to users as :now + (deadline - :boot).
-- The semantics mirror the Redis store's scripts in lua/.

-- name: ensure_counters
INSERT INTO counters (pool) VALUES (:pool) ON CONFLICT DO NOTHING;

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

-- name: ping
SELECT 1;

-- name: job_state
SELECT state FROM jobs
WHERE pool = :pool AND key = :key AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: job_record
SELECT * FROM jobs
WHERE pool = :pool AND key = :key AND (finished_at IS NULL OR finished_at >= :cutoff);

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

-- name: pending_by_handler
-- Pending jobs per handler (the jobs_queue_by_priority index alone), for the metrics that
-- an autoscaler reads.  Read-only.
SELECT handler, count(*) AS n FROM jobs
WHERE pool = :pool AND state = 'pending' GROUP BY handler;

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

-- name: max_pending
SELECT max_pending FROM pool_settings WHERE pool = :pool;

-- name: set_max_pending
INSERT INTO pool_settings (pool, max_pending) VALUES (:pool, :max_pending)
ON CONFLICT (pool) DO UPDATE SET max_pending = :max_pending;

-- name: pause
INSERT OR IGNORE INTO paused (pool, name, since) VALUES (:pool, :name, :now);

-- name: resume
DELETE FROM paused WHERE pool = :pool AND name = :name;

-- name: paused
SELECT name FROM paused WHERE pool = :pool;

-- name: running_counts
-- Running jobs of the handlers in :handlers, per handler and dispatch group, for
-- core/limits.py (a crashed supervisor's jobs count until their leases are recovered).
SELECT handler, job_group, count(*) AS running FROM jobs INDEXED BY jobs_leases
WHERE pool = :pool AND state = 'running' AND handler IN (SELECT value FROM json_each(:handlers))
GROUP BY handler, job_group;

-- name: forget_old_starts
DELETE FROM starts WHERE pool = :pool AND handler = :handler AND at <= :boot - :period;

-- name: recent_starts
SELECT at FROM starts WHERE pool = :pool AND handler = :handler ORDER BY at;

-- name: note_start
INSERT INTO starts (pool, handler, at) VALUES (:pool, :handler, :boot);

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

-- name: stop_expired_lease
UPDATE jobs SET state = 'stopped', lease_losses = :losses, finished_at = :now,
    error = 'stop requested; lease of ' || coalesce(supervisor, '?') || ' expired',
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

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

-- name: renew_lease
-- A null stat keeps the one stored before.  A lease held :reset_after seconds (wall
-- clock) resets the count of losses in a row.
UPDATE jobs SET lease_deadline = :deadline, pid = coalesce(:pid, pid),
    lease_losses = CASE WHEN :now - started_at >= :reset_after THEN 0 ELSE lease_losses END,
    rss_bytes = coalesce(:rss_bytes, rss_bytes), cpu_percent = coalesce(:cpu_percent, cpu_percent)
WHERE pool = :pool AND key = :key AND token = :token AND state = 'running'
    AND supervisor = :owner
RETURNING key, token, stop_requested,
    EXISTS (SELECT 1 FROM notes WHERE notes.pool = :pool AND notes.key = :key) AS notified;

-- name: held_job
SELECT handler, attempts, max_attempts, stop_requested FROM jobs
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token;

-- name: complete_job
UPDATE jobs SET state = 'succeeded', result = :result, error = NULL, finished_at = :now,
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token;

-- name: succeeded_under
SELECT 1 FROM jobs WHERE pool = :pool AND key = :key AND state = 'succeeded'
    AND supervisor = :owner AND token = :token;

-- name: save_checkpoint
UPDATE jobs SET checkpoint = :checkpoint, checkpoint_at = :now
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token
RETURNING 1 AS done;

-- name: finish_job
-- Ends a job failed or stopped.
UPDATE jobs SET state = :state, error = :error, finished_at = :now,
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL,
    reserved_for = NULL, reserved_until = NULL, moved_from = NULL
WHERE pool = :pool AND key = :key;

-- name: requeue_job
-- running -> pending, claimable from :due; :refund 1 gives the attempt back.
UPDATE jobs SET state = 'pending', attempts = attempts - :refund,
    error = coalesce(:error, error), due = :due,
    lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: snooze_job
-- running -> pending, claimable from :due, the attempt given back, one more snooze.
UPDATE jobs SET state = 'pending', attempts = attempts - 1, snoozes = snoozes + 1, due = :due,
    lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: retry_job
-- A failed or stopped job -> pending, claimable now, attempts, losses and snoozes from 0
-- (sql/retry.py); handler, payload, max_attempts and checkpoint kept.
UPDATE jobs SET state = 'pending', attempts = 0, lease_losses = 0, snoozes = 0,
    stop_requested = 0,
    error = NULL, result = NULL, started_at = NULL, finished_at = NULL, supervisor = NULL,
    due = :now, lease_expired_at = NULL
WHERE pool = :pool AND key = :key AND state IN ('failed', 'stopped')
RETURNING handler;

-- name: reserve_job
-- A released job (a move) is held for :reserved_for until its `due`.
UPDATE jobs SET reserved_for = :reserved_for, reserved_until = due, moved_from = :moved_from
WHERE pool = :pool AND key = :key;

-- name: stop_requested
SELECT stop_requested FROM jobs WHERE pool = :pool AND key = :key;

-- name: request_stop
UPDATE jobs SET stop_requested = 1 WHERE pool = :pool AND key = :key;

-- name: add_note
INSERT INTO notes (pool, key, payload) VALUES (:pool, :key, :payload);

-- name: drop_notes
DELETE FROM notes WHERE pool = :pool AND key = :key;

-- name: take_notes
-- A note's seq is its id.
SELECT id, payload FROM notes
WHERE pool = :pool AND key = :key AND id > :after AND EXISTS (
    SELECT 1 FROM jobs
    WHERE jobs.pool = :pool AND jobs.key = :key AND jobs.state = 'running'
        AND jobs.supervisor = :owner AND jobs.token = :token)
ORDER BY id;

-- name: ack_notes
DELETE FROM notes
WHERE pool = :pool AND key = :key AND id <= :upto AND EXISTS (
    SELECT 1 FROM jobs
    WHERE jobs.pool = :pool AND jobs.key = :key AND jobs.state = 'running'
        AND jobs.supervisor = :owner AND jobs.token = :token);

-- name: supervisor_entry
SELECT instance, lease_ttl, last_seen FROM supervisors WHERE pool = :pool AND id = :id;

-- name: upsert_supervisor
INSERT INTO supervisors (pool, id, instance, info, lease_ttl, last_seen)
VALUES (:pool, :id, :instance, :info, :lease_ttl, :boot)
ON CONFLICT (pool, id) DO UPDATE SET instance = excluded.instance, info = excluded.info,
    lease_ttl = excluded.lease_ttl, last_seen = excluded.last_seen;

-- name: touch_supervisor
UPDATE supervisors SET last_seen = :boot WHERE pool = :pool AND id = :id;

-- name: delete_supervisor
DELETE FROM supervisors WHERE pool = :pool AND id = :id AND instance = :instance;

-- name: supervisor_entries
-- Every entry; members.live_members leaves out those silent too long.
SELECT info, :boot - last_seen AS silent_for FROM supervisors WHERE pool = :pool;

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

-- name: touch_health
-- The store took a write; after a gap without one, it is taking them again since now.
INSERT INTO health (pool, last_ok, ok_since) VALUES (:pool, :now, :now)
ON CONFLICT (pool) DO UPDATE SET
    ok_since = CASE WHEN :now - last_ok > :gap THEN :now ELSE ok_since END, last_ok = :now;

-- name: health
SELECT last_ok, ok_since FROM health WHERE pool = :pool;

-- name: live_keys_of_schedule
SELECT key FROM jobs INDEXED BY jobs_by_schedule
WHERE pool = :pool AND schedule = :schedule AND state IN ('pending', 'running')
ORDER BY key;

-- name: schedule_last_fired
SELECT last_tick, fired_by, outcome, fingerprint, ended_at FROM schedules
WHERE pool = :pool AND name = :name;

-- name: restart_schedule
-- Its definition changed since its producer ended it: it fires again.
UPDATE schedules SET ended_at = NULL, ended_tick = NULL WHERE pool = :pool AND name = :name;

-- name: record_tick
-- The tick fired: :skipped is 1 when its fixed-key job was still live.
INSERT INTO schedules (pool, name, last_tick, fingerprint, fired_by, fired_at, outcome,
    detail, fires, skipped, missed)
VALUES (:pool, :name, :tick, :fingerprint, :owner, :now, :outcome, :detail, 1, :skipped,
    :missed)
ON CONFLICT (pool, name) DO UPDATE SET last_tick = excluded.last_tick,
    fingerprint = excluded.fingerprint, fired_by = excluded.fired_by,
    fired_at = excluded.fired_at, outcome = excluded.outcome, detail = excluded.detail,
    fires = fires + 1, skipped = skipped + excluded.skipped,
    missed = missed + excluded.missed;

-- name: record_tick_outcome
-- Only while the producer's tick is current: the last fired, by :owner, no outcome yet;
-- with :end 1, the schedule ends with it.
UPDATE schedules SET outcome = :outcome, detail = :detail,
    ended_at = CASE WHEN :end THEN :now ELSE ended_at END,
    ended_tick = CASE WHEN :end THEN :tick ELSE ended_tick END
WHERE pool = :pool AND name = :name AND last_tick = :tick AND fired_by = :owner
    AND outcome = 'fired'
RETURNING 1 AS done;

-- name: all_schedules
SELECT * FROM schedules WHERE pool = :pool ORDER BY name;

-- name: answer_stacks
INSERT OR REPLACE INTO stacks_answers (pool, request, answer, at)
VALUES (:pool, :request, :answer, :now);

-- name: forget_stacks_answers
DELETE FROM stacks_answers WHERE pool = :pool AND at < :cutoff;

-- name: stacks_answer
SELECT answer FROM stacks_answers WHERE pool = :pool AND request = :request;

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

-- name: output_job
SELECT state, token FROM jobs
WHERE pool = :pool AND key = :key AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: output_run
SELECT token, attempt, supervisor, max_bytes, total, ended FROM output_runs
WHERE pool = :pool AND key = :key AND token = :token;

-- name: output_runs
SELECT token, attempt, supervisor, max_bytes, total, ended FROM output_runs
WHERE pool = :pool AND key = :key ORDER BY token;

-- name: save_output_run
INSERT INTO output_runs (pool, key, token, attempt, supervisor, max_bytes, total, ended)
VALUES (:pool, :key, :token, :attempt, :supervisor, :max_bytes, :total, :ended)
ON CONFLICT (pool, key, token) DO UPDATE SET max_bytes = excluded.max_bytes,
    total = excluded.total, ended = max(ended, excluded.ended);

-- name: add_output_chunk
INSERT INTO output_chunks (pool, key, token, at, data)
VALUES (:pool, :key, :token, :at, :data);

-- name: output_chunks
-- The chunks that hold bytes from :start on, in order.
SELECT at, data FROM output_chunks
WHERE pool = :pool AND key = :key AND token = :token AND at + length(data) > :start
ORDER BY at;

-- name: first_output_chunk
SELECT min(at) FROM output_chunks WHERE pool = :pool AND key = :key AND token = :token;

-- name: drop_output_chunks_before
-- The chunks that end at or before :keep_from.
DELETE FROM output_chunks
WHERE pool = :pool AND key = :key AND token = :token AND at + length(data) <= :keep_from;

-- name: forget_output_runs
DELETE FROM output_runs WHERE pool = :pool AND key = :key;

-- name: forget_output_chunks
DELETE FROM output_chunks WHERE pool = :pool AND key = :key;

-- name: last_output_chunk
SELECT at, data FROM output_chunks
WHERE pool = :pool AND key = :key AND token = :token ORDER BY at DESC LIMIT 1;

-- name: extend_output_chunk
UPDATE output_chunks SET data = :data
WHERE pool = :pool AND key = :key AND token = :token AND at = :at;

-- name: drop_output_chunks
DELETE FROM output_chunks WHERE pool = :pool AND key = :key AND token = :token;

-- name: live_among
-- Which of :keys (a JSON array) are live (pending or running).
SELECT key FROM jobs
WHERE pool = :pool AND key IN (SELECT value FROM json_each(:keys))
    AND state IN ('pending', 'running');
