-- The PostgreSQL store's functions, in the schema `poolsup` (schema.py runs this file,
-- CREATE OR REPLACE, after the tables of sql/schema.sql are made and after every
-- migration: a new version of a function needs no migration of its own, only the
-- schema version bumped so that databases of the version before run this again).

-- A NOTIFY channel of the pool: '' for the pool's own, a supervisor id for its own,
-- '\ends' for the hints that a job may have ended.  Channel names are at most 63 bytes.
CREATE OR REPLACE FUNCTION poolsup.channel(p_pool text, p_name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 'poolsup_' || md5(p_pool || E'\n' || p_name) $$;

-- The database's clock, in epoch seconds.
CREATE OR REPLACE FUNCTION poolsup.now() RETURNS double precision
LANGUAGE sql VOLATILE
AS $$ SELECT extract(epoch FROM clock_timestamp())::double precision $$;

-- A job's history (the column poolsup.jobs.history, oldest first) with `p_event` added
-- (an array [at, event, supervisor, token, detail]): the newest `p_keep` events.
CREATE OR REPLACE FUNCTION poolsup.history_add(p_history jsonb, p_event jsonb, p_keep integer)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- not LANGUAGE sql: with its sub-SELECT it is not inlined, and is planned at each call
BEGIN
    IF jsonb_array_length(p_history) < p_keep THEN
        RETURN p_history || jsonb_build_array(p_event);
    END IF;
    RETURN coalesce((SELECT jsonb_agg(e.value ORDER BY e.n)
                     FROM jsonb_array_elements(p_history) WITH ORDINALITY AS e(value, n)
                     WHERE e.n > jsonb_array_length(p_history) - p_keep + 1), '[]')
        || jsonb_build_array(p_event);
END $$;

-- Wake one supervisor waiting for jobs of `p_handler` (its row is taken): NOTIFY 'w' on
-- its own channel, delivered when the transaction commits.  A row another open
-- transaction holds is skipped.
CREATE OR REPLACE FUNCTION poolsup.wake_one(p_pool text, p_handler text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_waiter text;
BEGIN
    DELETE FROM poolsup.waiting WHERE ctid = (
        SELECT ctid FROM poolsup.waiting WHERE pool = p_pool AND handler = p_handler
        LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING supervisor INTO v_waiter;
    IF v_waiter IS NOT NULL THEN
        PERFORM pg_notify(poolsup.channel(p_pool, v_waiter), 'w');
    END IF;
END $$;

-- Add jobs (postgres/dispatch.py): each element of `p_jobs` a request {key, handler,
-- payload (JSON text), max_attempts, run_at, schedule, priority, group, unique_for,
-- traceparent, tracestate};
-- for each, a code of store/refusals.py (max_pending only with p_limit_pending): 1 added, 0 its key is live, 2 it finished
-- within its unique window, 3 the pool holds its max_pending pending jobs.  One
-- statement, so that it runs the same on the store's connections and on a caller's
-- (`dispatch(..., connection=conn)`), inside the caller's transaction; it takes no
-- pool-wide lock (a caller's transaction may stay open): a key is decided by its row
-- (PRIMARY KEY (pool, key), ON CONFLICT DO NOTHING), and max_pending counts the
-- pending jobs it sees.  Each job due now wakes one waiting supervisor of its handler.
CREATE OR REPLACE FUNCTION poolsup.dispatch_jobs(p_pool text, p_retention double precision,
                                      p_jobs jsonb, p_limit_pending boolean DEFAULT true)
RETURNS integer[]
LANGUAGE plpgsql AS $$
DECLARE
    v_now double precision := poolsup.now();
    v_max_pending integer;
    v_pending bigint := 0;
    v_job jsonb;
    v_key text;
    v_state text;
    v_found boolean;
    v_finished double precision;
    v_unique double precision;
    v_run_at double precision;
    v_due double precision;
    v_code integer;
    v_added integer;
    v_codes integer[] := '{}';
BEGIN
    IF p_limit_pending THEN
        SELECT max_pending INTO v_max_pending FROM poolsup.pool_settings WHERE pool = p_pool;
    END IF;
    IF v_max_pending IS NOT NULL THEN
        SELECT count(*) INTO v_pending FROM poolsup.jobs
        WHERE pool = p_pool AND state = 'pending';
    END IF;
    FOR v_job IN SELECT value FROM jsonb_array_elements(p_jobs) LOOP
        v_key := v_job->>'key';
        v_run_at := (v_job->>'run_at')::double precision;
        v_due := greatest(v_now, coalesce(v_run_at, v_now));
        v_found := false;
        v_code := 0;
        -- Most keys are new: the first pass adds the job at once (while max_pending
        -- allows).  Only a key that has a row takes the second: the row is looked at, and
        -- a finished record (or one past retention) is replaced.
        FOR v_pass IN 1..2 LOOP
            IF v_pass = 1 AND v_max_pending IS NOT NULL AND v_pending >= v_max_pending THEN
                CONTINUE;
            END IF;
            IF v_pass = 2 THEN
                v_state := NULL;
                v_finished := NULL;
                SELECT state, finished_at INTO v_state, v_finished FROM poolsup.jobs
                WHERE pool = p_pool AND key = v_key;
                v_found := FOUND;
                IF v_finished IS NOT NULL AND v_finished < v_now - p_retention THEN
                    v_state := NULL;  -- past retention: gone, whether or not dropped yet
                END IF;
                v_unique := coalesce((v_job->>'unique_for')::double precision, 0);
                IF v_state IN ('pending', 'running') THEN
                    EXIT;  -- 0
                ELSIF v_state IS NOT NULL AND v_unique > 0 AND v_now - v_finished < v_unique
                THEN
                    v_code := 2;
                    EXIT;
                ELSIF v_max_pending IS NOT NULL AND v_pending >= v_max_pending THEN
                    v_code := 3;
                    EXIT;
                END IF;
                IF v_found THEN
                    DELETE FROM poolsup.jobs WHERE pool = p_pool AND key = v_key
                        AND state NOT IN ('pending', 'running');
                END IF;
            END IF;
            INSERT INTO poolsup.jobs (pool, key, handler, state, max_attempts, payload,
                created_at, due, run_at, schedule, priority, job_group, traceparent,
                tracestate, history)
            VALUES (p_pool, v_key, v_job->>'handler', 'pending',
                (v_job->>'max_attempts')::integer, convert_to(v_job->>'payload', 'UTF8'),
                v_now, v_due, v_run_at, v_job->>'schedule',
                coalesce((v_job->>'priority')::integer, 0), v_job->>'group',
                v_job->>'traceparent', v_job->>'tracestate',
                jsonb_build_array(jsonb_build_array(v_now, 'dispatched', NULL, NULL,
                                                    v_job->>'schedule')))
            ON CONFLICT (pool, key) DO NOTHING;
            GET DIAGNOSTICS v_added = ROW_COUNT;
            CONTINUE WHEN v_added = 0;  -- the second pass: another transaction added it first
            IF v_found THEN  -- what an earlier record of the key left behind
                DELETE FROM poolsup.output_runs WHERE pool = p_pool AND key = v_key;
                DELETE FROM poolsup.output_chunks WHERE pool = p_pool AND key = v_key;
                DELETE FROM poolsup.notes WHERE pool = p_pool AND key = v_key;
            END IF;
            v_pending := v_pending + 1;
            IF v_due <= v_now THEN
                PERFORM poolsup.wake_one(p_pool, v_job->>'handler');
            END IF;
            v_code := 1;
            EXIT;
        END LOOP;
        v_codes := v_codes || v_code;
    END LOOP;
    RETURN v_codes;
END $$;

-- A step of the job's history (postgres/history.py): the event added to its row, whose
-- newest `p_keep` events are kept.
CREATE OR REPLACE FUNCTION poolsup.note_event(p_pool text, p_key text, p_at double precision,
                                              p_event text, p_supervisor text, p_token bigint,
                                              p_detail text, p_keep integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE poolsup.jobs SET history = poolsup.history_add(history, jsonb_build_array(
            p_at, p_event, p_supervisor, p_token, p_detail), p_keep)
    WHERE pool = p_pool AND key = p_key;
END $$;

-- running -> succeeded with the result, if the lease (owner, token) still holds the job:
-- its history notes it, its notes are dropped, and its end is announced to those who
-- wait for it.  False if the lease is stale, unless the job succeeded under this very
-- lease (an earlier try whose answer was lost: nothing changes).
CREATE OR REPLACE FUNCTION poolsup.complete_job(p_pool text, p_key text, p_owner text,
                                                p_token bigint, p_result bytea,
                                                p_now double precision, p_keep integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE poolsup.jobs SET state = 'succeeded', result = p_result, error = NULL,
        finished_at = p_now, due = NULL, lease_deadline = NULL, pid = NULL,
        rss_bytes = NULL, cpu_percent = NULL, history = poolsup.history_add(history,
            jsonb_build_array(p_now, 'succeeded', p_owner, p_token, NULL), p_keep)
    WHERE pool = p_pool AND key = p_key AND state = 'running' AND supervisor = p_owner
        AND token = p_token;
    IF NOT FOUND THEN
        RETURN EXISTS (SELECT 1 FROM poolsup.jobs WHERE pool = p_pool AND key = p_key
                       AND state = 'succeeded' AND supervisor = p_owner AND token = p_token);
    END IF;
    DELETE FROM poolsup.notes WHERE pool = p_pool AND key = p_key;
    IF EXISTS (SELECT 1 FROM poolsup.end_waiters WHERE pool = p_pool AND key = p_key) THEN
        PERFORM pg_notify(poolsup.channel(p_pool, E'end\n' || p_key), 'e');
    END IF;
    RETURN true;
END $$;

-- The keys a claim may start, in order: first those released for `p_owner` (moves)
-- whose reservation has not run out, then the due ones, per handler on its own index (so
-- that a backlog of other handlers' jobs is never scanned), highest priority first and
-- oldest first within one; up to `p_count` of each.  Rows another transaction holds are
-- skipped; those returned are locked.
CREATE OR REPLACE FUNCTION poolsup.due_keys(p_pool text, p_owner text, p_handlers text[],
                                            p_count integer, p_now double precision)
RETURNS TABLE (o_key text, o_handler text, o_job_group text)
LANGUAGE plpgsql AS $$  -- not LANGUAGE sql: a SQL function's query is planned at each call
BEGIN
    RETURN QUERY
        WITH reserved AS (
            SELECT key, handler, job_group, reserved_until, seq
            FROM poolsup.jobs
            WHERE pool = p_pool AND state = 'pending' AND reserved_for = p_owner
                AND reserved_until > p_now AND handler = ANY(p_handlers)
            ORDER BY reserved_until, seq
            LIMIT p_count
            FOR UPDATE SKIP LOCKED
        ), due AS (
            SELECT j.* FROM unnest(p_handlers) AS h(handler)
            CROSS JOIN LATERAL (
                SELECT key, handler, job_group, priority, due, seq
                FROM poolsup.jobs
                WHERE pool = p_pool AND state = 'pending' AND handler = h.handler
                    AND due <= p_now
                ORDER BY priority DESC, due, seq
                LIMIT p_count
                FOR UPDATE SKIP LOCKED) AS j
            ORDER BY priority DESC, due, seq
            LIMIT p_count
        )
        SELECT key, handler, job_group FROM (
            SELECT 0 AS part, reserved_until AS until, 0 AS priority,
                NULL::double precision AS due, seq, key, handler, job_group
            FROM reserved
            UNION ALL
            SELECT 1, NULL, priority, due, seq, key, handler, job_group
            FROM due) AS found
        ORDER BY part, until, priority DESC, due, seq;
END $$;

-- pending -> running under `p_owner`, for each of `p_keys` in order, with the next
-- tokens of the pool's counter; each start noted in the job's history.  The rows a
-- claim hands its supervisor, with when each one's last lease had expired.  One
-- statement per key, on its primary key (a join of the keys' array with the jobs was
-- planned as a scan of the pool's jobs: the generic plan cannot know the array is short).
CREATE OR REPLACE FUNCTION poolsup.start_jobs(p_pool text, p_keys text[], p_owner text,
                                              p_lease_ttl double precision,
                                              p_now double precision, p_keep integer)
RETURNS TABLE (o_key text, o_handler text, o_payload bytea, o_token bigint,
               o_attempts integer, o_max_attempts integer, o_lease_deadline double precision,
               o_checkpoint bytea, o_traceparent text, o_tracestate text,
               o_has_notes boolean, o_lease_expired_at double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
    v_key text;
BEGIN
    IF cardinality(p_keys) = 0 THEN
        RETURN;  -- nothing written: an idle claim takes no transaction id
    END IF;
    UPDATE poolsup.counters SET token = token + cardinality(p_keys) WHERE pool = p_pool
    RETURNING token - cardinality(p_keys) INTO v_token;
    FOREACH v_key IN ARRAY p_keys LOOP
        v_token := v_token + 1;
        UPDATE poolsup.jobs j SET state = 'running', supervisor = p_owner, token = v_token,
            attempts = j.attempts + 1, started_at = p_now,
            lease_deadline = p_now + p_lease_ttl, due = NULL, pid = NULL, rss_bytes = NULL,
            cpu_percent = NULL, lease_expired_at = NULL, reserved_for = NULL,
            reserved_until = NULL, moved_from = NULL,
            history = poolsup.history_add(j.history, jsonb_build_array(
                p_now, 'started', p_owner, v_token, 'attempt ' || (j.attempts + 1)), p_keep)
        FROM (SELECT lease_expired_at FROM poolsup.jobs
              WHERE pool = p_pool AND key = v_key) AS before
        WHERE j.pool = p_pool AND j.key = v_key AND j.state = 'pending'
        RETURNING j.key, j.handler, j.payload, j.token, j.attempts, j.max_attempts,
            j.lease_deadline, j.checkpoint, j.traceparent, j.tracestate,
            before.lease_expired_at
        INTO o_key, o_handler, o_payload, o_token, o_attempts, o_max_attempts,
            o_lease_deadline, o_checkpoint, o_traceparent, o_tracestate, o_lease_expired_at;
        CONTINUE WHEN NOT FOUND;
        o_has_notes := EXISTS (SELECT 1 FROM poolsup.notes WHERE pool = p_pool AND key = v_key);
        RETURN NEXT;
    END LOOP;
END $$;

-- The end of a claim (postgres/leases.py claim): with `p_waits` (it left its supervisor
-- room), `p_owner` waits for jobs of `p_serves`; with `p_passes_on` (it is full), it
-- waits no more and wakes one waiting supervisor for each of `p_serves` that has due
-- jobs left (whether one waits is looked at first: in a backlog, none does).  Returns
-- the next due time of `p_handlers`' pending jobs, if any, for a claim that waits.
CREATE OR REPLACE FUNCTION poolsup.after_claim(p_pool text, p_owner text, p_serves text[],
                                               p_handlers text[], p_waits boolean,
                                               p_passes_on boolean, p_now double precision)
RETURNS double precision
LANGUAGE plpgsql AS $$
BEGIN
    IF p_waits THEN
        INSERT INTO poolsup.waiting (pool, handler, supervisor)
        SELECT p_pool, h, p_owner FROM unnest(p_serves) AS h
        WHERE NOT EXISTS (SELECT 1 FROM poolsup.waiting w
                          WHERE w.pool = p_pool AND w.handler = h AND w.supervisor = p_owner);
    ELSIF p_passes_on THEN
        DELETE FROM poolsup.waiting WHERE ctid IN (
            SELECT ctid FROM poolsup.waiting WHERE pool = p_pool AND supervisor = p_owner
            FOR UPDATE SKIP LOCKED);
        PERFORM poolsup.wake_one(p_pool, h) FROM unnest(p_serves) AS h
        WHERE EXISTS (SELECT 1 FROM poolsup.waiting w WHERE w.pool = p_pool AND w.handler = h)
            AND EXISTS (SELECT 1 FROM poolsup.jobs
                        WHERE pool = p_pool AND state = 'pending' AND handler = h
                            AND due <= p_now);
    END IF;
    IF NOT p_waits THEN
        RETURN NULL;  -- full: it claims again as its jobs end (a scan of the backlog saved)
    END IF;
    RETURN (SELECT min(due) FROM poolsup.jobs
            WHERE pool = p_pool AND state = 'pending' AND due > p_now
                AND handler = ANY(p_handlers));
END $$;
