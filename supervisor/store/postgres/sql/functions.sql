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
        v_state := NULL;
        v_finished := NULL;
        SELECT state, finished_at INTO v_state, v_finished FROM poolsup.jobs
        WHERE pool = p_pool AND key = v_key;
        v_found := FOUND;
        IF v_finished IS NOT NULL AND v_finished < v_now - p_retention THEN
            v_state := NULL;  -- past retention: gone, whether or not dropped yet
        END IF;
        v_unique := coalesce((v_job->>'unique_for')::double precision, 0);
        v_code := 1;
        IF v_state IN ('pending', 'running') THEN
            v_code := 0;
        ELSIF v_state IS NOT NULL AND v_unique > 0 AND v_now - v_finished < v_unique THEN
            v_code := 2;
        ELSIF v_max_pending IS NOT NULL AND v_pending >= v_max_pending THEN
            v_code := 3;
        END IF;
        IF v_code = 1 THEN
            IF v_found THEN  -- a finished record (or one past retention) is replaced
                DELETE FROM poolsup.jobs
                WHERE pool = p_pool AND key = v_key AND state NOT IN ('pending', 'running');
            END IF;
            v_run_at := (v_job->>'run_at')::double precision;
            v_due := greatest(v_now, coalesce(v_run_at, v_now));
            INSERT INTO poolsup.jobs (pool, key, handler, state, max_attempts, payload,
                created_at, due, run_at, schedule, priority, job_group, traceparent,
                tracestate)
            VALUES (p_pool, v_key, v_job->>'handler', 'pending',
                (v_job->>'max_attempts')::integer, convert_to(v_job->>'payload', 'UTF8'),
                v_now, v_due, v_run_at, v_job->>'schedule',
                coalesce((v_job->>'priority')::integer, 0), v_job->>'group',
                v_job->>'traceparent', v_job->>'tracestate')
            ON CONFLICT (pool, key) DO NOTHING;
            GET DIAGNOSTICS v_added = ROW_COUNT;
            IF v_added = 0 THEN
                v_code := 0;  -- another transaction added the key first
            ELSE
                IF v_found THEN  -- what an earlier record of the key left behind
                    DELETE FROM poolsup.job_events WHERE pool = p_pool AND key = v_key;
                    DELETE FROM poolsup.output_runs WHERE pool = p_pool AND key = v_key;
                    DELETE FROM poolsup.output_chunks WHERE pool = p_pool AND key = v_key;
                    DELETE FROM poolsup.notes WHERE pool = p_pool AND key = v_key;
                END IF;
                INSERT INTO poolsup.job_events (pool, key, at, event, detail)
                VALUES (p_pool, v_key, v_now, 'dispatched', v_job->>'schedule');
                v_pending := v_pending + 1;
                IF v_due <= v_now THEN
                    PERFORM poolsup.wake_one(p_pool, v_job->>'handler');
                END IF;
            END IF;
        END IF;
        v_codes := v_codes || v_code;
    END LOOP;
    RETURN v_codes;
END $$;
