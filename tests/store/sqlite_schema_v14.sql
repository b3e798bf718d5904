-- The SQLite store's schema 14, as it shipped: tests/store/test_sqlite_migration_v14.py
-- builds files of that version from it.
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
    -- A pending job put back by the expiry of its lease: that lease's deadline (boot
    -- clock, as lease_deadline), handed to the next claim for the failover time, which
    -- clears it.
    lease_expired_at REAL,
    lease_losses INTEGER NOT NULL DEFAULT 0,
    -- Runs of this dispatch that ended in sandbox.Snooze (each gave its attempt back).
    snoozes INTEGER NOT NULL DEFAULT 0,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    rss_bytes INTEGER,
    cpu_percent REAL,
    -- JSON text the job saved under its lease, handed to its later attempts; a new
    -- dispatch of the key starts without one.  checkpoint_at is wall clock.
    checkpoint BLOB,
    checkpoint_at REAL,
    -- A pending job released for one supervisor (a move): only it claims the job until
    -- reserved_until (wall clock, also the job's `due`, so that other claims skip it
    -- until then); moved_from is the supervisor that released it.  Cleared by a claim.
    reserved_for TEXT,
    reserved_until REAL,
    moved_from TEXT,
    -- The start time the dispatch asked for (wall clock; `due` was max(now, run_at)),
    -- kept once the job starts; and the schedule that dispatched it (NULL by hand).
    run_at REAL,
    schedule TEXT,
    -- 0-9: a handler's due jobs are claimed highest priority first; the dispatch group
    -- that max_running_per_group counts (NULL: none).
    priority INTEGER NOT NULL DEFAULT 0,
    job_group TEXT,
    UNIQUE (pool, key)
) STRICT;

CREATE INDEX jobs_queue ON jobs (pool, due) WHERE state = 'pending';
CREATE INDEX jobs_queue_by_priority ON jobs (pool, handler, priority, due)
    WHERE state = 'pending';
CREATE INDEX jobs_reserved ON jobs (pool, reserved_for, reserved_until)
    WHERE state = 'pending' AND reserved_for IS NOT NULL;
CREATE INDEX jobs_leases ON jobs (pool, lease_deadline) WHERE state = 'running';
CREATE INDEX jobs_finished ON jobs (pool, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs (pool, state, created_at);
CREATE INDEX jobs_by_schedule ON jobs (pool, schedule, key)
    WHERE schedule IS NOT NULL AND state IN ('pending', 'running');

-- One row per schedule that ever fired: its last fired tick (epoch seconds, the
-- caller's nominal time, compared exactly), who fired it when (wall clock), the last
-- outcome with its detail (JSON text), and counts; while its producer has ended it, when
-- (wall clock) and the tick whose plan did (no tick of the same fingerprint fires).
CREATE TABLE schedules (
    pool TEXT NOT NULL,
    name TEXT NOT NULL,
    last_tick REAL NOT NULL,
    fingerprint TEXT NOT NULL,
    fired_by TEXT NOT NULL,
    fired_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT,
    fires INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    missed INTEGER NOT NULL DEFAULT 0,
    ended_at REAL,
    ended_tick REAL,
    PRIMARY KEY (pool, name)
) STRICT;

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
-- boot_id is '' until an opener could read its boot id.
CREATE TABLE host (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    boot_id TEXT NOT NULL
) STRICT;

-- The machine ids that used the file during that boot: another boot id is a reboot
-- when it is one of theirs, another host when it is not.
CREATE TABLE host_machines (
    machine_id TEXT PRIMARY KEY
) STRICT;

-- When the store last took a write for each pool, and since when it has been taking
-- them (wall clock), for `status`.
CREATE TABLE health (
    pool TEXT PRIMARY KEY,
    last_ok REAL NOT NULL,
    ok_since REAL NOT NULL
) STRICT;

-- When the pool's last claim ran, and the last gap between two claims long enough that
-- nobody reached the store in it (boot clock; core/lease_losses.py write_gap).
CREATE TABLE claim_gaps (
    pool TEXT PRIMARY KEY,
    last_claim REAL NOT NULL,
    gap_start REAL,
    gap_end REAL
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

-- What no claim serves: a handler's name, or '*' for the whole pool; since (wall clock).
CREATE TABLE paused (
    pool TEXT NOT NULL,
    name TEXT NOT NULL,
    since REAL NOT NULL,
    PRIMARY KEY (pool, name)
) STRICT;

-- The pool's settings that the store enforces.
CREATE TABLE pool_settings (
    pool TEXT PRIMARY KEY,
    max_pending INTEGER
) STRICT;

-- The starts of a rate-limited handler within its rate's period (boot clock, as leases).
CREATE TABLE starts (
    pool TEXT NOT NULL,
    handler TEXT NOT NULL,
    at REAL NOT NULL
) STRICT;
CREATE INDEX starts_by_handler ON starts (pool, handler, at);

-- Each job's history (sqlite/history.py): its newest events, oldest first by id, with
-- the store time, the supervisor and token of the run concerned, and a detail.  They
-- go with the job's record.
CREATE TABLE job_events (
    id INTEGER PRIMARY KEY,
    pool TEXT NOT NULL,
    key TEXT NOT NULL,
    at REAL NOT NULL,
    event TEXT NOT NULL,
    supervisor TEXT,
    token INTEGER,
    detail TEXT
) STRICT;
CREATE INDEX job_events_by_job ON job_events (pool, key, id);
CREATE TRIGGER job_events_go_with_the_job AFTER DELETE ON jobs BEGIN
    DELETE FROM job_events WHERE pool = old.pool AND key = old.key;
END;

-- The answer to a `poolsup debug` request (JSON), kept a minute; wall clock.
CREATE TABLE stacks_answers (
    pool TEXT NOT NULL,
    request TEXT NOT NULL,
    answer BLOB NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (pool, request)
) STRICT;

-- What each run of a job printed (sqlite/output.py): a row per run (its token) with its
-- numbers (max_bytes: how much of it readers see; total: bytes printed), and its kept
-- bytes in chunks, each starting at byte `at` of the run's output.  They go with the
-- job's record; a new dispatch or a retry of the key forgets them.
CREATE TABLE output_runs (
    pool TEXT NOT NULL,
    key TEXT NOT NULL,
    token INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    supervisor TEXT NOT NULL,
    max_bytes INTEGER NOT NULL,
    total INTEGER NOT NULL,
    ended INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (pool, key, token)
) STRICT;
CREATE TABLE output_chunks (
    pool TEXT NOT NULL,
    key TEXT NOT NULL,
    token INTEGER NOT NULL,
    at INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (pool, key, token, at)
) STRICT;
CREATE TRIGGER output_goes_with_the_job AFTER DELETE ON jobs BEGIN
    DELETE FROM output_runs WHERE pool = old.pool AND key = old.key;
    DELETE FROM output_chunks WHERE pool = old.pool AND key = old.key;
END;
