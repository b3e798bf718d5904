"""The SQLite store's schema 9 (priorities, dispatch groups, pauses, max_pending, rate
limits) from a version 8 file: its running lease is kept, its pending jobs are claimed
in their order, and a job of a higher priority dispatched after the upgrade goes first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store import sqlite_db, sqlite_schema
from supervisor.store.records import DispatchRequest
from supervisor.store.sqlite_schema import SCHEMA_VERSION
from supervisor.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio

V8_SCHEMA = Path(__file__).with_name("sqlite_schema_v8.sql")


async def test_a_version_8_file_keeps_its_jobs_and_takes_priorities(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V8_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 8")
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)",
                     (sqlite_schema.boot_id() or "",))
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))
        for key, due in (("old-2", now - 2), ("old-1", now - 3)):
            conn.execute(
                "INSERT INTO jobs (pool, key, handler, state, max_attempts, payload, "
                "created_at, due) VALUES ('media', ?, 'h', 'pending', 3, x'7b7d', ?, ?)",
                (key, due, due))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        await store.dispatch(DispatchRequest(key="urgent", handler="h", payload=b"{}",
                                             max_attempts=3, priority=9))
        first = await store.claim("sup-b", ["h"], 1, 30.0, 3)
        rest = await store.claim("sup-b", ["h"], 2, 30.0, 3)
        held = await store.job("held")
    finally:
        await store.close()

    assert [job.key for job in first.jobs] == ["urgent"]
    assert [job.key for job in rest.jobs] == ["old-1", "old-2"]
    assert (held.state, held.supervisor, held.token) == ("running", "sup-a", 5)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
