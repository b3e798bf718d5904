"""The SQLite store's schema 10 (each job's history) from a version 9 file: its jobs
are kept with no history, the running one goes on and its end is noted, and the
history of a job goes with its record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from supervisor.store.records import Lease
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio

async def test_a_version_9_file_keeps_its_jobs_and_records_their_history(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    old_store_file(db_path, 9)

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

