-- The SQLite store's schema.  Its version is PRAGMA user_version, set to
-- sqlite_schema.SCHEMA_VERSION when these statements run on an empty file; a change
-- here bumps that number and adds a migration, never a reset.
-- Every row carries its pool, so several pools can share one file.

-- One row per pool: the fencing-token counter, which only grows.
CREATE TABLE counters (
    pool TEXT PRIMARY KEY,
    token INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE jobs (
    pool TEXT NOT NULL,
    key TEXT NOT NULL,
    handler TEXT NOT NULL,
    state TEXT NOT NULL
        CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'stopped')),
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    token INTEGER NOT NULL DEFAULT 0,
    supervisor TEXT,
    payload BLOB NOT NULL,
    result BLOB,
    error TEXT,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    -- A pending job is claimable from `due` on, lowest first: dispatch time, retry
    -- time, or (release, recovery) a time before every other pending job.  Wall clock.
    due REAL,
    lease_deadline REAL,         -- CLOCK_BOOTTIME seconds of the host in `host`
    lease_losses INTEGER NOT NULL DEFAULT 0,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    rss_bytes INTEGER,
    cpu_percent REAL,
    -- JSON text the job saved under its lease, handed to its later attempts; a new
    -- dispatch of the key starts without one.  checkpoint_at is wall clock.
    checkpoint BLOB,
    checkpoint_at REAL,
    UNIQUE (pool, key)
) STRICT;

CREATE INDEX jobs_queue ON jobs (pool, due) WHERE state = 'pending';
CREATE INDEX jobs_queue_by_handler ON jobs (pool, handler, due) WHERE state = 'pending';
CREATE INDEX jobs_leases ON jobs (pool, lease_deadline) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (pool, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs (pool, state, created_at);

-- Messages for a job, taken by its owner oldest first and kept until acknowledged; a
-- message's seq is its id.
CREATE TABLE notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    key TEXT NOT NULL,
    payload BLOB NOT NULL
) STRICT;

CREATE INDEX notes_by_key ON notes (pool, key, id);

CREATE TABLE supervisors (
    pool TEXT NOT NULL,
    id TEXT NOT NULL,
    instance TEXT NOT NULL,
    info TEXT NOT NULL,          -- SupervisorInfo as JSON
    lease_ttl REAL NOT NULL,
    last_seen REAL NOT NULL,     -- CLOCK_BOOTTIME seconds
    PRIMARY KEY (pool, id)
) STRICT;

-- The host whose boot clock the lease deadlines and last_seen times count on: a
-- file opened after a reboot has every running lease expired (sqlite/schema.py).
CREATE TABLE host (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id TEXT NOT NULL
) STRICT;

-- When the store last took a write for each pool, and since when it has been taking
-- them (wall clock), for `status`.
CREATE TABLE health (
    pool TEXT PRIMARY KEY,
    last_ok REAL NOT NULL,
    ok_since REAL NOT NULL
) STRICT;

-- Change hints polled by events(); AUTOINCREMENT so trimmed ids are never reused.
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    pool TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT,
    at REAL NOT NULL
) STRICT;

CREATE INDEX events_by_pool ON events (pool, id);
CREATE INDEX events_by_age ON events (pool, at);
