"""The SQLite store's schema 9 (priorities, dispatch groups, pauses, max_pending, rate
limits) from a version 8 file: its running lease is kept, its pending jobs are claimed
in their order, and a job of a higher priority dispatched after the upgrade goes first."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import DispatchRequest
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio

async def test_a_version_8_file_keeps_its_jobs_and_takes_priorities(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    now, _boot = old_store_file(db_path, 8)
    with sqlite3.connect(db_path) as conn:
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
