-- The PostgreSQL store's own statements, one per named section (schema.load_queries),
-- beside those both SQL stores run as they are (store/sql/queries.sql), with psycopg's
-- named parameters.  Every statement is scoped to %(pool)s.  One clock, the
-- database's: %(now)s is poolsup.now() read once the transaction holds the pool's lock
-- (postgres/db.py), for lease deadlines, last_seen, `due` and what users read alike.
-- The semantics mirror the SQLite store's sqlite/sql/queries.sql.  %(lease_now)s, in the
-- shared statements, is the same time as %(now)s.

-- name: raise_tokens
-- Tokens keep growing across a change of primary that lost the last writes: the
-- counter jumps to at least %(floor)s.
UPDATE poolsup.counters SET token = greatest(token, %(floor)s) WHERE pool = %(pool)s;

-- name: claim_context
-- What a claim reads before it decides (postgres/tx.py claim_context), in one statement:
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

-- name: state_counts
SELECT state, count(*) AS n FROM poolsup.jobs
WHERE pool = %(pool)s AND (finished_at IS NULL OR finished_at >= %(cutoff)s)
GROUP BY state;

-- name: running_counts
SELECT handler, job_group, count(*) AS running FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running' AND handler = ANY(%(handlers)s::text[])
GROUP BY handler, job_group;

-- name: note_claim
INSERT INTO poolsup.claim_gaps (pool, last_claim, gap_start, gap_end)
VALUES (%(pool)s, %(now)s, %(gap_start)s::double precision, %(gap_end)s::double precision)
ON CONFLICT (pool) DO UPDATE SET last_claim = excluded.last_claim,
    gap_start = coalesce(excluded.gap_start, claim_gaps.gap_start),
    gap_end = coalesce(excluded.gap_end, claim_gaps.gap_end);

-- name: expired_leases
-- The running jobs whose lease ran out (sql/leases.py recover_expired_leases
-- decides each one's recovery).
SELECT key, handler, supervisor, lease_deadline, lease_losses, stop_requested
FROM poolsup.jobs
WHERE pool = %(pool)s AND state = 'running' AND lease_deadline < %(now)s
ORDER BY lease_deadline LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

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

-- name: complete_job
-- running -> succeeded (sql/functions.sql complete_job).
SELECT poolsup.complete_job(%(pool)s, %(key)s, %(owner)s, %(token)s, %(result)s, %(now)s,
                            %(keep)s) AS done;

-- name: job_holder
SELECT supervisor FROM poolsup.jobs
WHERE pool = %(pool)s AND key = %(key)s AND state = 'running';

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

-- name: live_keys_of_schedule
SELECT key FROM poolsup.jobs
WHERE pool = %(pool)s AND schedule = %(schedule)s AND state IN ('pending', 'running')
ORDER BY key;

-- name: live_among
SELECT key FROM poolsup.jobs
WHERE pool = %(pool)s AND key = ANY(%(keys)s::text[]) AND state IN ('pending', 'running');

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

-- name: end_stuck_lock_holder
-- The session that has held the pool's lock (postgres/db.py) in a transaction begun
-- %(stuck_after)s seconds ago or more, ended: its client froze inside the transaction (a
-- SIGSTOPped or paused supervisor), and every other write of the pool, renewals
-- included, waits for it.  Its transaction rolls back.  A bigint advisory key shows in
-- pg_locks as its high half (classid) and low half (objid), objsubid 1.
WITH lock AS (SELECT hashtextextended(%(lock)s, 0) AS key)
SELECT count(pg_terminate_backend(activity.pid)) AS ended
FROM lock, pg_locks AS held
JOIN pg_stat_activity AS activity ON activity.pid = held.pid
WHERE held.locktype = 'advisory' AND held.granted AND held.objsubid = 1
    AND held.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND held.classid = ((lock.key >> 32) & 4294967295)::oid
    AND held.objid = (lock.key & 4294967295)::oid
    AND activity.pid <> pg_backend_pid()
    AND activity.xact_start < clock_timestamp() - make_interval(secs => %(stuck_after)s)
