-- The PostgreSQL store's statements, one per named section (schema.load_queries), with
-- psycopg's named parameters.  Every statement is scoped to %(pool)s.  One clock, the
-- database's: %(now)s is poolsup.now() read once the transaction holds the pool's lock
-- (postgres/db.py), for lease deadlines, last_seen, `due` and what users read alike.
-- The semantics mirror the SQLite store's sqlite/sql/queries.sql.

-- name: ensure_counters
INSERT INTO poolsup.counters (pool) VALUES (%(pool)s) ON CONFLICT DO NOTHING;

-- name: raise_tokens
-- Tokens keep growing across a change of primary that lost the last writes: the
-- counter jumps to at least %(floor)s.
UPDATE poolsup.counters SET token = greatest(token, %(floor)s) WHERE pool = %(pool)s;

-- name: claim_context
-- What a claim reads before it decides (postgres/leases.py claim), in one statement:
-- the primary this transaction runs on, as its system identifier (another cluster) and
-- its timeline (a promotion, or a restore, starts a new one; the timeline of the
-- current WAL file, which changes at once, unlike pg_control_checkpoint's); the pool's
-- epoch record (NULL columns if none) and token counter (postgres/failover.py); the
-- pool's last claim and write gap (note_claim); the paused names.
SELECT (SELECT system_identifier FROM pg_control_system())::text || ':'
        || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) AS primary_identity,
    e.master, e.number, e.seen_at, e.max_ttl, c.token,
    g.last_claim, g.gap_start, g.gap_end,
    ARRAY(SELECT name FROM poolsup.paused p WHERE p.pool = %(pool)s) AS paused
FROM poolsup.counters c LEFT JOIN poolsup.epochs e ON e.pool = c.pool
    LEFT JOIN poolsup.claim_gaps g ON g.pool = c.pool
WHERE c.pool = %(pool)s;

-- name: save_epoch
INSERT INTO poolsup.epochs (pool, master, number, seen_at, max_ttl)
VALUES (%(pool)s, %(master)s, %(number)s, %(seen_at)s::double precision, %(max_ttl)s)
ON CONFLICT (pool) DO UPDATE SET master = excluded.master, number = excluded.number,
    seen_at = excluded.seen_at, max_ttl = excluded.max_ttl;

-- name: front_of_queue
-- A due time ahead of every pending job, and never in the future.
SELECT least(coalesce(min(due), %(now)s), %(now)s) - 1 FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending';

-- name: jobs_statistics
-- Whether poolsup.jobs was ever analyzed, and how many of its rows changed since
-- (postgres/statistics.py).
SELECT last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL AS analyzed,
    n_mod_since_analyze AS changed
FROM pg_stat_user_tables WHERE relid = 'poolsup.jobs'::regclass;

-- name: analyze_tables
ANALYZE poolsup.jobs;

-- name: drop_expired_records
-- Records past retention, with what goes with them.  A row another transaction holds
-- (a caller's open dispatch of the key) is skipped, never waited for.
WITH gone AS (
    DELETE FROM poolsup.jobs WHERE (pool, key) IN (
        SELECT pool, key FROM poolsup.jobs
        WHERE pool = %(pool)s AND finished_at < %(cutoff)s
        FOR UPDATE SKIP LOCKED)
    RETURNING key
), runs AS (
    DELETE FROM poolsup.output_runs WHERE pool = %(pool)s AND key IN (SELECT key FROM gone)
), chunks AS (
    DELETE FROM poolsup.output_chunks WHERE pool = %(pool)s AND key IN (SELECT key FROM gone)
), waiters AS (  -- those a caller that died left behind
    DELETE FROM poolsup.end_waiters WHERE pool = %(pool)s AND key IN (SELECT key FROM gone)
)
DELETE FROM poolsup.notes WHERE pool = %(pool)s AND key IN (SELECT key FROM gone);

-- name: ping
SELECT 1;

-- name: dispatch_jobs
SELECT poolsup.dispatch_jobs(%(pool)s, %(retention)s, %(jobs)s, %(limit_pending)s);

-- name: database_identity
-- Which database this is: its name, and its cluster's system identifier.
SELECT current_database() AS dbname,
    (SELECT system_identifier FROM pg_control_system())::text AS sysid;

-- name: caller_dispatch
-- dispatch(..., connection=conn): on the caller's connection (postgres/caller.py), only
-- if it is on the pool's database (%(dbname)s of the cluster %(sysid)s); else NULL codes.
SELECT CASE WHEN here.dbname = %(dbname)s AND here.sysid = %(sysid)s
            THEN poolsup.dispatch_jobs(%(pool)s, %(retention)s, %(jobs)s) END AS codes,
    (SELECT max_pending FROM poolsup.pool_settings WHERE pool = %(pool)s) AS max_pending,
    here.dbname, here.sysid
FROM (SELECT current_database() AS dbname,
          (SELECT system_identifier FROM pg_control_system())::text AS sysid) AS here;

-- name: caller_record
SELECT * FROM poolsup.jobs WHERE pool = %(pool)s AND key = %(key)s;

-- name: job_state
SELECT state FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s
  AND (finished_at IS NULL OR finished_at >= %(cutoff)s);

-- name: job_with_events
-- A job's record, its history included, in one statement without a transaction of its
-- own (postgres/reads.py job).
SELECT * FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s
  AND (finished_at IS NULL OR finished_at >= poolsup.now() - %(retention)s);

-- name: all_jobs
SELECT * FROM poolsup.jobs WHERE pool = %(pool)s ORDER BY created_at, seq;

-- name: jobs_in_state
SELECT * FROM poolsup.jobs WHERE pool = %(pool)s AND state = %(state)s
ORDER BY created_at, seq;

-- name: jobs_page
-- One page of the listing by key (code point order:).
SELECT * FROM poolsup.jobs
WHERE pool = %(pool)s AND key > %(after)s
  AND left(key, length(%(prefix)s)) = %(prefix)s
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (finished_at IS NULL OR finished_at >= %(cutoff)s)
ORDER BY key LIMIT %(limit)s;

-- name: latest_finished
SELECT * FROM poolsup.jobs
WHERE pool = %(pool)s AND state = %(state)s AND finished_at >= %(cutoff)s
ORDER BY finished_at DESC, seq DESC LIMIT %(limit)s;

-- name: running_jobs
SELECT * FROM poolsup.jobs WHERE pool = %(pool)s AND state = 'running'
ORDER BY started_at, seq;

-- name: moving_jobs
SELECT * FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending' AND reserved_for IS NOT NULL
    AND reserved_until > %(now)s
ORDER BY created_at, seq;

-- name: pending_by_handler
-- Pending jobs per handler (the jobs_queue_by_priority index alone), for the metrics that
-- an autoscaler reads.  Read-only.
SELECT handler, count(*) AS n FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending' GROUP BY handler;

-- name: state_counts
SELECT state, count(*) AS n FROM poolsup.jobs
WHERE pool = %(pool)s AND (finished_at IS NULL OR finished_at >= %(cutoff)s)
GROUP BY state;

-- name: max_pending
SELECT max_pending FROM poolsup.pool_settings WHERE pool = %(pool)s;

-- name: set_max_pending
INSERT INTO poolsup.pool_settings (pool, max_pending) VALUES (%(pool)s, %(max_pending)s)
ON CONFLICT (pool) DO UPDATE SET max_pending = excluded.max_pending;

-- name: pause
INSERT INTO poolsup.paused (pool, name, since) VALUES (%(pool)s, %(name)s, %(now)s)
ON CONFLICT DO NOTHING;

-- name: resume
DELETE FROM poolsup.paused WHERE pool = %(pool)s AND name = %(name)s;

-- name: paused
SELECT name FROM poolsup.paused WHERE pool = %(pool)s;

-- name: running_counts
SELECT handler, job_group, count(*) AS running FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running' AND handler = ANY(%(handlers)s::text[])
GROUP BY handler, job_group;

-- name: forget_old_starts
DELETE FROM poolsup.starts
WHERE pool = %(pool)s AND handler = %(handler)s AND at <= %(now)s - %(period)s;

-- name: recent_starts
SELECT at FROM poolsup.starts WHERE pool = %(pool)s AND handler = %(handler)s ORDER BY at;

-- name: note_start
INSERT INTO poolsup.starts (pool, handler, at) VALUES (%(pool)s, %(handler)s, %(now)s);

-- name: note_claim
INSERT INTO poolsup.claim_gaps (pool, last_claim, gap_start, gap_end)
VALUES (%(pool)s, %(now)s, %(gap_start)s::double precision, %(gap_end)s::double precision)
ON CONFLICT (pool) DO UPDATE SET last_claim = excluded.last_claim,
    gap_start = coalesce(excluded.gap_start, claim_gaps.gap_start),
    gap_end = coalesce(excluded.gap_end, claim_gaps.gap_end);

-- name: expired_leases
-- The running jobs whose lease ran out (postgres/leases.py recover_expired_leases
-- decides each one's recovery).
SELECT key, handler, supervisor, lease_deadline, lease_losses, stop_requested
FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running' AND lease_deadline < %(now)s
ORDER BY lease_deadline LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: stop_expired_lease
UPDATE poolsup.jobs SET state = 'stopped', lease_losses = %(losses)s, finished_at = %(now)s,
    error = 'stop requested; lease of ' || coalesce(supervisor, '?') || ' expired',
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: fail_expired_lease
UPDATE poolsup.jobs SET state = 'failed', lease_losses = %(losses)s, finished_at = %(now)s,
    error = format('lease lost %%s times (limit %%s), last held by %%s', %(losses)s::integer,
                   %(max_lease_losses)s::integer, coalesce(supervisor, '?')),
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: requeue_expired_lease
UPDATE poolsup.jobs SET state = 'pending', lease_losses = %(losses)s,
    attempts = attempts - 1, due = %(due)s, lease_expired_at = lease_deadline,
    lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: due_keys
-- The keys a claim may start, in order (sql/functions.sql due_keys).
SELECT o_key AS key, o_handler AS handler, o_job_group AS job_group
FROM poolsup.due_keys(%(pool)s, %(owner)s, %(handlers)s::text[], %(count)s, %(now)s);

-- name: start_due
-- The first %(count)s keys a claim may start, started (sql/functions.sql due_keys and
-- start_jobs): a claim without limits to weigh decides nothing between the two.
SELECT o_key AS key, o_handler AS handler, o_payload AS payload, o_token AS token,
    o_attempts AS attempts, o_max_attempts AS max_attempts,
    o_lease_deadline AS lease_deadline, o_checkpoint AS checkpoint,
    o_traceparent AS traceparent, o_tracestate AS tracestate, o_has_notes AS has_notes,
    o_lease_expired_at AS lease_expired_at
FROM poolsup.start_jobs(%(pool)s, ARRAY(
        SELECT d.o_key FROM poolsup.due_keys(%(pool)s, %(owner)s, %(handlers)s::text[],
                                             %(count)s, %(now)s) WITH ORDINALITY AS d
        ORDER BY d.ordinality LIMIT %(count)s),
    %(owner)s, %(lease_ttl)s, %(now)s, %(keep)s);

-- name: start_jobs
-- pending -> running for each of %(keys)s (sql/functions.sql start_jobs).
SELECT o_key AS key, o_handler AS handler, o_payload AS payload, o_token AS token,
    o_attempts AS attempts, o_max_attempts AS max_attempts,
    o_lease_deadline AS lease_deadline, o_checkpoint AS checkpoint,
    o_traceparent AS traceparent, o_tracestate AS tracestate, o_has_notes AS has_notes,
    o_lease_expired_at AS lease_expired_at
FROM poolsup.start_jobs(%(pool)s, %(keys)s::text[], %(owner)s, %(lease_ttl)s, %(now)s,
                        %(keep)s);

-- name: after_claim
-- What a claim leaves behind (sql/functions.sql after_claim); the next due time of
-- %(handlers)s.
SELECT poolsup.after_claim(%(pool)s, %(owner)s, %(serves)s::text[], %(handlers)s::text[],
                           %(waits)s, %(passes_on)s, %(now)s) AS next_due;

-- name: stop_waiting
DELETE FROM poolsup.waiting WHERE ctid IN (
    SELECT ctid FROM poolsup.waiting WHERE pool = %(pool)s AND supervisor = %(owner)s
    FOR UPDATE SKIP LOCKED);

-- name: wake_one
SELECT poolsup.wake_one(%(pool)s, %(handler)s);

-- name: notify
SELECT pg_notify(poolsup.channel(%(pool)s, %(channel)s), %(message)s);

-- name: notify_end
-- A job's end, on its channel, if somebody waits for it (poolsup.end_waiters).
SELECT pg_notify(poolsup.channel(%(pool)s, %(channel)s), 'e')
WHERE EXISTS (SELECT 1 FROM poolsup.end_waiters WHERE pool = %(pool)s AND key = %(key)s);

-- name: add_end_waiter
INSERT INTO poolsup.end_waiters (pool, key, waiter) VALUES (%(pool)s, %(key)s, %(waiter)s);

-- name: drop_end_waiter
DELETE FROM poolsup.end_waiters
WHERE pool = %(pool)s AND key = %(key)s AND waiter = %(waiter)s;

-- name: renew_lease
UPDATE poolsup.jobs SET lease_deadline = %(deadline)s, pid = coalesce(%(pid)s, pid),
    lease_losses = CASE WHEN %(now)s - started_at >= %(reset_after)s THEN 0
                        ELSE lease_losses END,
    rss_bytes = coalesce(%(rss_bytes)s, rss_bytes),
    cpu_percent = coalesce(%(cpu_percent)s, cpu_percent)
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s AND state = 'running'
    AND supervisor = %(owner)s
RETURNING key, token, stop_requested,
    EXISTS (SELECT 1 FROM poolsup.notes n WHERE n.pool = %(pool)s AND n.key = %(key)s)
        AS notified;

-- name: held_job
SELECT handler, attempts, max_attempts, stop_requested FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s AND state = 'running' AND supervisor = %(owner)s
    AND token = %(token)s;

-- name: complete_job
-- running -> succeeded (sql/functions.sql complete_job).
SELECT poolsup.complete_job(%(pool)s, %(key)s, %(owner)s, %(token)s, %(result)s, %(now)s,
                            %(keep)s) AS done;

-- name: save_checkpoint
UPDATE poolsup.jobs SET checkpoint = %(checkpoint)s, checkpoint_at = %(now)s
WHERE pool = %(pool)s AND key = %(key)s AND state = 'running' AND supervisor = %(owner)s
    AND token = %(token)s
RETURNING 1 AS done;

-- name: finish_job
UPDATE poolsup.jobs SET state = %(state)s, error = %(error)s, finished_at = %(now)s,
    due = NULL, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL,
    reserved_for = NULL, reserved_until = NULL, moved_from = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: requeue_job
UPDATE poolsup.jobs SET state = 'pending', attempts = attempts - %(refund)s,
    error = coalesce(%(error)s, error), due = %(due)s,
    lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: snooze_job
-- running -> pending, claimable from %(due)s, the attempt given back, one more snooze.
UPDATE poolsup.jobs SET state = 'pending', attempts = attempts - 1, snoozes = snoozes + 1,
    due = %(due)s, lease_deadline = NULL, pid = NULL, rss_bytes = NULL, cpu_percent = NULL
WHERE pool = %(pool)s AND key = %(key)s;

-- name: retry_job
UPDATE poolsup.jobs SET state = 'pending', attempts = 0, lease_losses = 0, snoozes = 0,
    stop_requested = false, error = NULL, result = NULL, started_at = NULL,
    finished_at = NULL, supervisor = NULL, due = %(now)s, lease_expired_at = NULL
WHERE pool = %(pool)s AND key = %(key)s AND state IN ('failed', 'stopped')
RETURNING handler;

-- name: reserve_job
UPDATE poolsup.jobs SET reserved_for = %(reserved_for)s, reserved_until = due,
    moved_from = %(moved_from)s
WHERE pool = %(pool)s AND key = %(key)s;

-- name: stop_requested
SELECT stop_requested FROM poolsup.jobs WHERE pool = %(pool)s AND key = %(key)s;

-- name: job_holder
SELECT supervisor FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s AND state = 'running';

-- name: request_stop
UPDATE poolsup.jobs SET stop_requested = true WHERE pool = %(pool)s AND key = %(key)s;

-- name: add_note
INSERT INTO poolsup.notes (pool, key, payload) VALUES (%(pool)s, %(key)s, %(payload)s);

-- name: drop_notes
DELETE FROM poolsup.notes WHERE pool = %(pool)s AND key = %(key)s;

-- name: take_notes
SELECT id, payload FROM poolsup.notes
WHERE pool = %(pool)s AND key = %(key)s AND id > %(after)s AND EXISTS (
    SELECT 1 FROM poolsup.jobs j
    WHERE j.pool = %(pool)s AND j.key = %(key)s AND j.state = 'running'
        AND j.supervisor = %(owner)s AND j.token = %(token)s)
ORDER BY id;

-- name: ack_notes
DELETE FROM poolsup.notes
WHERE pool = %(pool)s AND key = %(key)s AND id <= %(upto)s AND EXISTS (
    SELECT 1 FROM poolsup.jobs j
    WHERE j.pool = %(pool)s AND j.key = %(key)s AND j.state = 'running'
        AND j.supervisor = %(owner)s AND j.token = %(token)s);

-- name: supervisor_entry
SELECT instance, lease_ttl, last_seen FROM poolsup.supervisors
WHERE pool = %(pool)s AND id = %(id)s;

-- name: upsert_supervisor
INSERT INTO poolsup.supervisors (pool, id, instance, info, lease_ttl, last_seen)
VALUES (%(pool)s, %(id)s, %(instance)s, %(info)s, %(lease_ttl)s, %(now)s)
ON CONFLICT (pool, id) DO UPDATE SET instance = excluded.instance, info = excluded.info,
    lease_ttl = excluded.lease_ttl, last_seen = excluded.last_seen;

-- name: touch_supervisor
UPDATE poolsup.supervisors SET last_seen = %(now)s WHERE pool = %(pool)s AND id = %(id)s;

-- name: delete_supervisor
DELETE FROM poolsup.supervisors
WHERE pool = %(pool)s AND id = %(id)s AND instance = %(instance)s;

-- name: supervisor_entries
SELECT info, %(now)s - last_seen AS silent_for FROM poolsup.supervisors
WHERE pool = %(pool)s;

-- name: member_load
SELECT supervisor AS id, handler, count(*) AS n FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running'
GROUP BY supervisor, handler
UNION ALL
SELECT reserved_for, NULL, count(*) FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'pending' AND reserved_for IS NOT NULL
    AND reserved_until > %(now)s
GROUP BY reserved_for;

-- name: drop_silent_supervisors
DELETE FROM poolsup.supervisors
WHERE pool = %(pool)s
    AND %(now)s - last_seen > greatest(%(live_ttls)s * lease_ttl, %(garbage_after)s);

-- name: touch_health
INSERT INTO poolsup.health (pool, last_ok, ok_since) VALUES (%(pool)s, %(now)s, %(now)s)
ON CONFLICT (pool) DO UPDATE SET
    ok_since = CASE WHEN %(now)s - health.last_ok > %(gap)s THEN %(now)s
                    ELSE health.ok_since END,
    last_ok = %(now)s;

-- name: health
SELECT last_ok, ok_since FROM poolsup.health WHERE pool = %(pool)s;

-- name: live_keys_of_schedule
SELECT key FROM poolsup.jobs
WHERE pool = %(pool)s AND schedule = %(schedule)s AND state IN ('pending', 'running')
ORDER BY key;

-- name: live_among
SELECT key FROM poolsup.jobs
WHERE pool = %(pool)s AND key = ANY(%(keys)s::text[]) AND state IN ('pending', 'running');

-- name: schedule_last_fired
SELECT last_tick, fired_by, outcome, fingerprint, ended_at FROM poolsup.schedules
WHERE pool = %(pool)s AND name = %(name)s;

-- name: restart_schedule
-- Its definition changed since its producer ended it: it fires again.
UPDATE poolsup.schedules SET ended_at = NULL, ended_tick = NULL
WHERE pool = %(pool)s AND name = %(name)s;

-- name: record_tick
INSERT INTO poolsup.schedules (pool, name, last_tick, fingerprint, fired_by, fired_at,
    outcome, detail, fires, skipped, missed)
VALUES (%(pool)s, %(name)s, %(tick)s, %(fingerprint)s, %(owner)s, %(now)s, %(outcome)s,
    %(detail)s, 1, %(skipped)s, %(missed)s)
ON CONFLICT (pool, name) DO UPDATE SET last_tick = excluded.last_tick,
    fingerprint = excluded.fingerprint, fired_by = excluded.fired_by,
    fired_at = excluded.fired_at, outcome = excluded.outcome, detail = excluded.detail,
    fires = schedules.fires + 1, skipped = schedules.skipped + excluded.skipped,
    missed = schedules.missed + excluded.missed;

-- name: record_tick_outcome
-- With %(end)s, the schedule ends with it.
UPDATE poolsup.schedules SET outcome = %(outcome)s, detail = %(detail)s,
    ended_at = CASE WHEN %(end)s THEN %(now)s ELSE ended_at END,
    ended_tick = CASE WHEN %(end)s THEN %(tick)s ELSE ended_tick END
WHERE pool = %(pool)s AND name = %(name)s AND last_tick = %(tick)s
    AND fired_by = %(owner)s AND outcome = 'fired'
RETURNING 1 AS done;

-- name: all_schedules
SELECT * FROM poolsup.schedules WHERE pool = %(pool)s ORDER BY name;

-- name: answer_stacks
INSERT INTO poolsup.stacks_answers (pool, request, answer, at)
VALUES (%(pool)s, %(request)s, %(answer)s, %(now)s)
ON CONFLICT (pool, request) DO UPDATE SET answer = excluded.answer, at = excluded.at;

-- name: forget_stacks_answers
DELETE FROM poolsup.stacks_answers WHERE pool = %(pool)s AND at < %(cutoff)s;

-- name: stacks_answer
SELECT answer FROM poolsup.stacks_answers WHERE pool = %(pool)s AND request = %(request)s;

-- name: note_job_event
-- A step of the job's history (postgres/history.py; sql/functions.sql note_event),
-- naming the supervisor and token of its run while it runs; with an %(owner)s, only
-- while its lease (%(token)s) holds the job.
SELECT poolsup.note_event(%(pool)s, %(key)s, %(now)s, %(event)s,
    CASE WHEN state = 'running' THEN supervisor END, CASE WHEN state = 'running' THEN token END,
    %(detail)s, %(keep)s)
FROM poolsup.jobs WHERE pool = %(pool)s AND key = %(key)s
    AND (%(owner)s::text IS NULL OR (state = 'running' AND supervisor = %(owner)s::text
                                     AND token = %(token)s::bigint));

-- name: fill_start_pid
-- The job's newest event, if it is the start of this lease's run, gets the pid.
UPDATE poolsup.jobs SET history = jsonb_set(history, '{-1,4}',
        to_jsonb((history -> -1 ->> 4) || ', pid ' || %(pid)s::text))
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s AND supervisor = %(owner)s
    AND state = 'running' AND pid IS NULL
    AND history -> -1 ->> 1 = 'started' AND (history -> -1 ->> 3)::bigint = %(token)s;

-- name: output_job
SELECT state, token FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s
  AND (finished_at IS NULL OR finished_at >= %(cutoff)s);

-- name: output_run
SELECT token, attempt, supervisor, max_bytes, total, ended FROM poolsup.output_runs
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s;

-- name: output_runs
SELECT token, attempt, supervisor, max_bytes, total, ended FROM poolsup.output_runs
WHERE pool = %(pool)s AND key = %(key)s ORDER BY token;

-- name: save_output_run
INSERT INTO poolsup.output_runs (pool, key, token, attempt, supervisor, max_bytes, total,
    ended)
VALUES (%(pool)s, %(key)s, %(token)s, %(attempt)s, %(supervisor)s, %(max_bytes)s,
    %(total)s, %(ended)s)
ON CONFLICT (pool, key, token) DO UPDATE SET max_bytes = excluded.max_bytes,
    total = excluded.total, ended = output_runs.ended OR excluded.ended;

-- name: add_output_chunk
INSERT INTO poolsup.output_chunks (pool, key, token, at, data)
VALUES (%(pool)s, %(key)s, %(token)s, %(at)s, %(data)s);

-- name: output_chunks
SELECT at, data FROM poolsup.output_chunks
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s
    AND at + length(data) > %(start)s
ORDER BY at;

-- name: first_output_chunk
SELECT min(at) FROM poolsup.output_chunks
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s;

-- name: drop_output_chunks_before
DELETE FROM poolsup.output_chunks
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s
    AND at + length(data) <= %(keep_from)s;

-- name: forget_output_runs
DELETE FROM poolsup.output_runs WHERE pool = %(pool)s AND key = %(key)s;

-- name: forget_output_chunks
DELETE FROM poolsup.output_chunks WHERE pool = %(pool)s AND key = %(key)s;

-- name: last_output_chunk
SELECT at, data FROM poolsup.output_chunks
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s ORDER BY at DESC LIMIT 1;

-- name: extend_output_chunk
UPDATE poolsup.output_chunks SET data = %(data)s
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s AND at = %(at)s;

-- name: drop_output_chunks
DELETE FROM poolsup.output_chunks
WHERE pool = %(pool)s AND key = %(key)s AND token = %(token)s;
