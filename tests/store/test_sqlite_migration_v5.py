"""The SQLite store's schema 6 (the deadline of an expired lease, for the failover
time) from a version 5 file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore

pytestmark = pytest.mark.anyio

V5_SCHEMA = Path(__file__).with_name("sqlite_schema_v5.sql")


async def test_a_version_5_file_is_migrated_and_its_expired_lease_has_its_deadline(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V5_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 5")
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'lost', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot - 2))
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, max_attempts, payload, created_at, "
            "due) VALUES ('media', 'waiting', 'h', 'pending', 3, x'7b7d', ?, ?)",
            (now - 10, now - 10))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        batch = await store.claim("sup-b", ["h"], 5, 30.0, 3)
        assert batch.recovered == 1
        expired = {job.key: job.lease_expired_at for job in batch.jobs}
        assert expired["waiting"] is None
        assert expired["lost"] == pytest.approx(now - 2, abs=0.5)
        assert await store.counts() == {"pending": 0, "running": 2, "succeeded": 0,
                                        "failed": 0, "stopped": 0}
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        assert "lease_expired_at" in columns
