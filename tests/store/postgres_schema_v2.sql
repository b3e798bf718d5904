-- The PostgreSQL store's schema as version 2 shipped it: sql/schema.sql, then
-- sql/functions.sql.
-- The PostgreSQL store's tables, in the schema `poolsup` (schema.py runs this file on a
-- database without it, then sql/functions.sql, under a transaction-scoped advisory
-- lock, and records the version in poolsup.schema_version; a change here bumps
-- SCHEMA_VERSION and adds a migration in schema.py, never a reset).  Every row carries
-- its pool, so several pools share one database.  Times are epoch seconds (double precision) of the
-- database's clock (clock_timestamp()), read inside each transaction.

CREATE SCHEMA IF NOT EXISTS poolsup;

CREATE TABLE poolsup.schema_version (
    version integer NOT NULL
);

-- One row per pool: the fencing-token counter, which only grows.
CREATE TABLE poolsup.counters (
    pool text PRIMARY KEY,
    token bigint NOT NULL DEFAULT 0
);

CREATE SEQUENCE poolsup.job_seq;

CREATE TABLE poolsup.jobs (
    pool text NOT NULL,
    key text COLLATE "C" NOT NULL,  -- code point order, as the other stores list keys
    -- Dispatch order (the SQLite store's rowid): a new dispatch of the key takes a new one.
    seq bigint NOT NULL DEFAULT nextval('poolsup.job_seq'),
    handler text NOT NULL,
    state text NOT NULL
        CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'stopped')),
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    token bigint NOT NULL DEFAULT 0,
    supervisor text,
    payload bytea NOT NULL,
    result bytea,
    error text,
    created_at double precision NOT NULL,
    started_at double precision,
    finished_at double precision,
    due double precision,
    lease_deadline double precision,
    lease_expired_at double precision,
    lease_losses integer NOT NULL DEFAULT 0,
    -- Runs of this dispatch that ended in sandbox.Snooze (each gave its attempt back).
    snoozes integer NOT NULL DEFAULT 0,
    stop_requested boolean NOT NULL DEFAULT false,
    pid integer,
    rss_bytes bigint,
    cpu_percent double precision,
    checkpoint bytea,
    checkpoint_at double precision,
    reserved_for text,
    reserved_until double precision,
    moved_from text,
    run_at double precision,
    schedule text,
    priority integer NOT NULL DEFAULT 0,
    job_group text,
    -- The W3C trace context its dispatch kept (docs/tracing.md), NULL if none.
    traceparent text,
    tracestate text,
    PRIMARY KEY (pool, key)
);

CREATE INDEX jobs_queue_by_priority ON poolsup.jobs (pool, handler, priority DESC, due, seq)
    WHERE state = 'pending';
CREATE INDEX jobs_reserved ON poolsup.jobs (pool, reserved_for, reserved_until)
    WHERE state = 'pending' AND reserved_for IS NOT NULL;
CREATE INDEX jobs_leases ON poolsup.jobs (pool, lease_deadline) WHERE state = 'running';
CREATE INDEX jobs_finished ON poolsup.jobs (pool, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_by_state ON poolsup.jobs (pool, state, created_at);
CREATE INDEX jobs_by_schedule ON poolsup.jobs (pool, schedule, key)
    WHERE schedule IS NOT NULL AND state IN ('pending', 'running');

CREATE TABLE poolsup.schedules (
    pool text NOT NULL,
    name text COLLATE "C" NOT NULL,
    last_tick double precision NOT NULL,
    fingerprint text NOT NULL,
    fired_by text NOT NULL,
    fired_at double precision NOT NULL,
    outcome text NOT NULL,
    detail text,
    fires integer NOT NULL DEFAULT 0,
    skipped integer NOT NULL DEFAULT 0,
    missed integer NOT NULL DEFAULT 0,
    -- While its producer has ended it: when, and the tick whose plan did.
    ended_at double precision,
    ended_tick double precision,
    PRIMARY KEY (pool, name)
);

-- Messages for a job, taken by its owner oldest first and kept until acknowledged; a
-- message's seq is its id.
CREATE TABLE poolsup.notes (
    id bigserial PRIMARY KEY,
    pool text NOT NULL,
    key text NOT NULL,
    payload bytea NOT NULL
);
CREATE INDEX notes_by_key ON poolsup.notes (pool, key, id);

CREATE TABLE poolsup.supervisors (
    pool text NOT NULL,
    id text NOT NULL,
    instance text NOT NULL,
    info text NOT NULL,
    lease_ttl double precision NOT NULL,
    last_seen double precision NOT NULL,
    PRIMARY KEY (pool, id)
);

CREATE TABLE poolsup.health (
    pool text PRIMARY KEY,
    last_ok double precision NOT NULL,
    ok_since double precision NOT NULL
);

CREATE TABLE poolsup.claim_gaps (
    pool text PRIMARY KEY,
    last_claim double precision NOT NULL,
    gap_start double precision,
    gap_end double precision
);

CREATE TABLE poolsup.paused (
    pool text NOT NULL,
    name text NOT NULL,
    since double precision NOT NULL,
    PRIMARY KEY (pool, name)
);

CREATE TABLE poolsup.pool_settings (
    pool text PRIMARY KEY,
    max_pending integer
);

CREATE TABLE poolsup.starts (
    pool text NOT NULL,
    handler text NOT NULL,
    at double precision NOT NULL
);
CREATE INDEX starts_by_handler ON poolsup.starts (pool, handler, at);

CREATE TABLE poolsup.job_events (
    id bigserial PRIMARY KEY,
    pool text NOT NULL,
    key text NOT NULL,
    at double precision NOT NULL,
    event text NOT NULL,
    supervisor text,
    token bigint,
    detail text
);
CREATE INDEX job_events_by_job ON poolsup.job_events (pool, key, id);

CREATE TABLE poolsup.stacks_answers (
    pool text NOT NULL,
    request text NOT NULL,
    answer bytea NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (pool, request)
);

CREATE TABLE poolsup.output_runs (
    pool text NOT NULL,
    key text NOT NULL,
    token bigint NOT NULL,
    attempt integer NOT NULL,
    supervisor text NOT NULL,
    max_bytes bigint NOT NULL,
    total bigint NOT NULL,
    ended boolean NOT NULL DEFAULT false,
    PRIMARY KEY (pool, key, token)
);
CREATE TABLE poolsup.output_chunks (
    pool text NOT NULL,
    key text NOT NULL,
    token bigint NOT NULL,
    at bigint NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (pool, key, token, at)
);

-- The pool's epoch (core/failover.py Epoch): the primary that wrote it (its system
-- identifier and timeline), its number, when the change that began it was seen (NULL
-- for the pool's first), and the longest lease ttl claimed in the pool.
CREATE TABLE poolsup.epochs (
    pool text PRIMARY KEY,
    master text NOT NULL,
    number bigint NOT NULL,
    seen_at double precision,
    max_ttl double precision NOT NULL
);

-- The supervisors whose last claim left them room, per handler: a dispatch wakes one
-- of them per job it adds (deleting its row) on its own channel.  No unique key: a
-- dispatch inside a caller's open transaction may hold a row it deletes, and a claim
-- must never wait for it (a duplicate row costs a spare wake-up).
CREATE TABLE poolsup.waiting (
    pool text NOT NULL,
    handler text NOT NULL,
    supervisor text NOT NULL
);
CREATE INDEX waiting_by_handler ON poolsup.waiting (pool, handler);

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
