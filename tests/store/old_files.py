"""SQLite store files of an older schema, as the migration tests start from them: the
shipped schema of that version (tests/store/sqlite_schema_vN.sql), this host's boot id,
the pool's token counter at 5, and optionally a job running under token 5."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite import schema as sqlite_schema

POOL = "media"


def old_store_file(db_path: Path, version: int, *, held: bool = True) -> tuple[float, float]:
    """Write a version-`version` file; with `held`, job 'held' (handler h) runs under
    token 5 of sup-a with 30 s left.  The wall and boot clocks it was written at."""
    now, boot = sqlite_db.read_clocks()
    schema = Path(__file__).with_name(f"sqlite_schema_v{version}.sql")
    with sqlite3.connect(db_path) as conn:
        conn.executescript(schema.read_text())
        conn.execute(f"PRAGMA user_version = {version}")
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)",
                     (sqlite_schema.boot_id() or "",))
        conn.execute("INSERT INTO counters (pool, token) VALUES (?, 5)", (POOL,))
        if held:
            conn.execute(
                "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
                "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
                "(?, 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
                (POOL, now - 10, now - 5, boot + 30))
    return now, boot
