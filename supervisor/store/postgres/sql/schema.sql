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
    -- Its history, oldest first: [at, event, supervisor, token, detail] each, the newest
    -- HISTORY_LIMIT kept (sql/functions.sql history_add), written by the statement of the
    -- change each event describes.
    history jsonb NOT NULL DEFAULT '[]',
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

-- The callers waiting for a job to end (`wait`, postgres/events.py waiting_for_end): a
-- job's end is notified on its channel only while one waits, since every NOTIFY is read
-- by every backend that listens in the database.
CREATE TABLE poolsup.end_waiters (
    pool text NOT NULL,
    key text NOT NULL,
    waiter text NOT NULL
);
CREATE INDEX end_waiters_by_key ON poolsup.end_waiters (pool, key);

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
