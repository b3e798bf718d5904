-- The statements both SQL stores run as they are (sql/statements.py prints them in each
-- engine's dialect), one per named section; each engine's sql/queries.sql holds those
-- that differ.  Parameters are named (:name).  Every statement is scoped to :pool.
-- Clocks, both read inside the transaction: :now, the store's clock for users (SQLite:
-- this host's wall clock; PostgreSQL: the server's), and :lease_now, the one lease
-- deadlines and supervisors' last_seen count on (SQLite: CLOCK_BOOTTIME; PostgreSQL: the
-- server's).  The semantics mirror the Redis store's scripts in lua/.

-- name: ensure_counters
INSERT INTO poolsup.counters (pool) VALUES (:pool) ON CONFLICT DO NOTHING;

-- name: ping
SELECT 1;

-- name: job_record
-- A job's row (PostgreSQL's own read of one job is job_with_events, outside any
-- transaction).
SELECT * FROM poolsup.jobs
WHERE pool = :pool AND key = :key AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: job_state
SELECT state FROM poolsup.jobs
WHERE pool = :pool AND key = :key
  AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: pending_by_handler
-- Pending jobs per handler (the jobs_queue_by_priority index alone), for the metrics that
-- an autoscaler reads.  Read-only.
SELECT handler, count(*) AS n FROM poolsup.jobs
WHERE pool = :pool AND state = 'pending' GROUP BY handler;

-- name: max_pending
SELECT max_pending FROM poolsup.pool_settings WHERE pool = :pool;

-- name: set_max_pending
INSERT INTO poolsup.pool_settings (pool, max_pending) VALUES (:pool, :max_pending)
ON CONFLICT (pool) DO UPDATE SET max_pending = excluded.max_pending;

-- name: pause
INSERT INTO poolsup.paused (pool, name, since) VALUES (:pool, :name, :now)
ON CONFLICT DO NOTHING;

-- name: resume
DELETE FROM poolsup.paused WHERE pool = :pool AND name = :name;

-- name: paused
SELECT name FROM poolsup.paused WHERE pool = :pool;

-- name: forget_old_starts
DELETE FROM poolsup.starts
WHERE pool = :pool AND handler = :handler AND at <= :lease_now - :period;

-- name: recent_starts
SELECT at FROM poolsup.starts WHERE pool = :pool AND handler = :handler ORDER BY at;

-- name: note_start
INSERT INTO poolsup.starts (pool, handler, at) VALUES (:pool, :handler, :lease_now);

-- name: stop_expired_lease
UPDATE poolsup.jobs SET state = 'stopped', lease_losses = :losses, finished_at = :now,
    error = 'stop requested; lease of ' || coalesce(supervisor, '?') || ' expired',
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: held_job
SELECT handler, attempts, max_attempts, stop_requested FROM poolsup.jobs
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token;

-- name: save_checkpoint
UPDATE poolsup.jobs SET checkpoint = :checkpoint, checkpoint_at = :now
WHERE pool = :pool AND key = :key AND state = 'running' AND supervisor = :owner
    AND token = :token
RETURNING 1 AS done;

-- name: finish_job
UPDATE poolsup.jobs SET state = :state, error = :error, finished_at = :now,
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL,
    reserved_for = NULL, reserved_until = NULL, moved_from = NULL
WHERE pool = :pool AND key = :key;

-- name: requeue_job
UPDATE poolsup.jobs SET state = 'pending', attempts = attempts - :refund,
    error = coalesce(:error, error), due = :due,
    lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: snooze_job
-- running -> pending, claimable from :due, the attempt given back, one more snooze.
UPDATE poolsup.jobs SET state = 'pending', attempts = attempts - 1, snoozes = snoozes + 1,
    due = :due, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = :pool AND key = :key;

-- name: retry_job
UPDATE poolsup.jobs SET state = 'pending', attempts = 0, lease_losses = 0, snoozes = 0,
    stop_requested = false, error = NULL, result = NULL, started_at = NULL,
    finished_at = NULL, supervisor = NULL, due = :now, lease_expired_at = NULL
WHERE pool = :pool AND key = :key AND state IN ('failed', 'stopped')
RETURNING handler;

-- name: reserve_job
UPDATE poolsup.jobs SET reserved_for = :reserved_for, reserved_until = due,
    moved_from = :moved_from
WHERE pool = :pool AND key = :key;

-- name: stop_requested
SELECT stop_requested FROM poolsup.jobs WHERE pool = :pool AND key = :key;

-- name: request_stop
UPDATE poolsup.jobs SET stop_requested = true WHERE pool = :pool AND key = :key;

-- name: add_note
INSERT INTO poolsup.notes (pool, key, payload) VALUES (:pool, :key, :payload);

-- name: drop_notes
DELETE FROM poolsup.notes WHERE pool = :pool AND key = :key;

-- name: take_notes
SELECT id, payload FROM poolsup.notes
WHERE pool = :pool AND key = :key AND id > :after AND EXISTS (
    SELECT 1 FROM poolsup.jobs j
    WHERE j.pool = :pool AND j.key = :key AND j.state = 'running'
        AND j.supervisor = :owner AND j.token = :token)
ORDER BY id;

-- name: ack_notes
DELETE FROM poolsup.notes
WHERE pool = :pool AND key = :key AND id <= :upto AND EXISTS (
    SELECT 1 FROM poolsup.jobs j
    WHERE j.pool = :pool AND j.key = :key AND j.state = 'running'
        AND j.supervisor = :owner AND j.token = :token);

-- name: supervisor_entry
SELECT instance, lease_ttl, last_seen FROM poolsup.supervisors
WHERE pool = :pool AND id = :id;

-- name: upsert_supervisor
INSERT INTO poolsup.supervisors (pool, id, instance, info, lease_ttl, last_seen)
VALUES (:pool, :id, :instance, :info, :lease_ttl, :lease_now)
ON CONFLICT (pool, id) DO UPDATE SET instance = excluded.instance, info = excluded.info,
    lease_ttl = excluded.lease_ttl, last_seen = excluded.last_seen;

-- name: touch_supervisor
UPDATE poolsup.supervisors SET last_seen = :lease_now WHERE pool = :pool AND id = :id;

-- name: delete_supervisor
DELETE FROM poolsup.supervisors
WHERE pool = :pool AND id = :id AND instance = :instance;

-- name: supervisor_entries
SELECT info, :lease_now - last_seen AS silent_for FROM poolsup.supervisors
WHERE pool = :pool;

-- name: touch_health
INSERT INTO poolsup.health (pool, last_ok, ok_since) VALUES (:pool, :now, :now)
ON CONFLICT (pool) DO UPDATE SET
    ok_since = CASE WHEN :now - health.last_ok > :gap THEN :now
                    ELSE health.ok_since END,
    last_ok = :now;

-- name: health
SELECT last_ok, ok_since FROM poolsup.health WHERE pool = :pool;

-- name: schedule_last_fired
SELECT last_tick, fired_by, outcome, fingerprint, ended_at FROM poolsup.schedules
WHERE pool = :pool AND name = :name;

-- name: restart_schedule
-- Its definition changed since its producer ended it: it fires again.
UPDATE poolsup.schedules SET ended_at = NULL, ended_tick = NULL
WHERE pool = :pool AND name = :name;

-- name: record_tick_outcome
-- With :end, the schedule ends with it.
UPDATE poolsup.schedules SET outcome = :outcome, detail = :detail,
    ended_at = CASE WHEN :end THEN :now ELSE ended_at END,
    ended_tick = CASE WHEN :end THEN :tick ELSE ended_tick END
WHERE pool = :pool AND name = :name AND last_tick = :tick
    AND fired_by = :owner AND outcome = 'fired'
RETURNING 1 AS done;

-- name: all_schedules
SELECT * FROM poolsup.schedules WHERE pool = :pool ORDER BY name;

-- name: forget_stacks_answers
DELETE FROM poolsup.stacks_answers WHERE pool = :pool AND at < :cutoff;

-- name: stacks_answer
SELECT answer FROM poolsup.stacks_answers WHERE pool = :pool AND request = :request;

-- name: output_job
SELECT state, token FROM poolsup.jobs
WHERE pool = :pool AND key = :key
  AND (finished_at IS NULL OR finished_at >= :cutoff);

-- name: output_run
SELECT token, attempt, supervisor, max_bytes, total, ended FROM poolsup.output_runs
WHERE pool = :pool AND key = :key AND token = :token;

-- name: output_runs
SELECT token, attempt, supervisor, max_bytes, total, ended FROM poolsup.output_runs
WHERE pool = :pool AND key = :key ORDER BY token;

-- name: add_output_chunk
INSERT INTO poolsup.output_chunks (pool, key, token, at, data)
VALUES (:pool, :key, :token, :at, :data);

-- name: output_chunks
SELECT at, data FROM poolsup.output_chunks
WHERE pool = :pool AND key = :key AND token = :token
    AND at + length(data) > :start
ORDER BY at;

-- name: first_output_chunk
SELECT min(at) FROM poolsup.output_chunks
WHERE pool = :pool AND key = :key AND token = :token;

-- name: drop_output_chunks_before
DELETE FROM poolsup.output_chunks
WHERE pool = :pool AND key = :key AND token = :token
    AND at + length(data) <= :keep_from;

-- name: forget_output_runs
DELETE FROM poolsup.output_runs WHERE pool = :pool AND key = :key;

-- name: forget_output_chunks
DELETE FROM poolsup.output_chunks WHERE pool = :pool AND key = :key;

-- name: last_output_chunk
SELECT at, data FROM poolsup.output_chunks
WHERE pool = :pool AND key = :key AND token = :token ORDER BY at DESC LIMIT 1;

-- name: extend_output_chunk
UPDATE poolsup.output_chunks SET data = :data
WHERE pool = :pool AND key = :key AND token = :token AND at = :at;

-- name: drop_output_chunks
DELETE FROM poolsup.output_chunks
WHERE pool = :pool AND key = :key AND token = :token;

-- name: renew_lease
UPDATE poolsup.jobs SET lease_deadline = :deadline, pid = coalesce(:pid, pid),
    lease_losses = CASE WHEN :now - started_at >= :reset_after THEN 0
                        ELSE lease_losses END,
    rss_bytes = coalesce(:rss_bytes, rss_bytes),
    cpu_percent = coalesce(:cpu_percent, cpu_percent)
WHERE pool = :pool AND key = :key AND token = :token AND state = 'running'
    AND supervisor = :owner
RETURNING key, token, stop_requested,
    EXISTS (SELECT 1 FROM poolsup.notes n WHERE n.pool = :pool AND n.key = :key)
        AS notified;

-- name: record_tick
INSERT INTO poolsup.schedules (pool, name, last_tick, fingerprint, fired_by, fired_at,
    outcome, detail, fires, skipped, missed)
VALUES (:pool, :name, :tick, :fingerprint, :owner, :now, :outcome,
    :detail, 1, :skipped, :missed)
ON CONFLICT (pool, name) DO UPDATE SET last_tick = excluded.last_tick,
    fingerprint = excluded.fingerprint, fired_by = excluded.fired_by,
    fired_at = excluded.fired_at, outcome = excluded.outcome, detail = excluded.detail,
    fires = schedules.fires + 1, skipped = schedules.skipped + excluded.skipped,
    missed = schedules.missed + excluded.missed;

-- name: answer_stacks
INSERT INTO poolsup.stacks_answers (pool, request, answer, at)
VALUES (:pool, :request, :answer, :now)
ON CONFLICT (pool, request) DO UPDATE SET answer = excluded.answer, at = excluded.at;

-- name: save_output_run
INSERT INTO poolsup.output_runs (pool, key, token, attempt, supervisor, max_bytes, total,
    ended)
VALUES (:pool, :key, :token, :attempt, :supervisor, :max_bytes,
    :total, :ended)
ON CONFLICT (pool, key, token) DO UPDATE SET max_bytes = excluded.max_bytes,
    total = excluded.total, ended = output_runs.ended OR excluded.ended;
