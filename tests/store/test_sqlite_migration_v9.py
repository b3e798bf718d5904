"""The SQLite store's schema 10 (each job's history) from a version 9 file: its jobs
are kept with no history, the running one goes on and its end is noted, and the
history of a job goes with its record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from supervisor.store import sqlite_db, sqlite_schema
from supervisor.store.records import Lease
from supervisor.store.sqlite_schema import SCHEMA_VERSION
from supervisor.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio

V9_SCHEMA = Path(__file__).with_name("sqlite_schema_v9.sql")


async def test_a_version_9_file_keeps_its_jobs_and_records_their_history(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V9_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 9")
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)",
                     (sqlite_schema.boot_id() or "",))
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media", retention=0.2)
    try:
        before = await store.job("held")
        await store.complete(Lease("held", 5, "sup-a"), b"{}")
        after = await store.job("held")
        await anyio.sleep(0.4)  # past the retention: the next write drops the record
        assert await store.jobs() == []
    finally:
        await store.close()

    assert before.events == ()
    assert [(e.event, e.supervisor, e.token) for e in after.events] == [
        ("succeeded", "sup-a", 5)]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM job_events").fetchone()[0] == 0

