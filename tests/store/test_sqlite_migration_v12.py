"""The SQLite store's schema 13 (each job's count of snoozes) from a version 12 file: its
running job snoozes, counted from 0, and runs again with the same attempt."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import Lease
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import POOL, old_store_file

pytestmark = pytest.mark.anyio


async def test_a_version_12_file_counts_the_snoozes_of_its_running_job(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    old_store_file(db_path, 12)

    store = await SqliteStore.open(f"sqlite:///{db_path}", POOL, retention=60.0)
    try:
        before = await store.job("held")
        state = await store.snooze(Lease("held", 5, "sup-a"), 0)
        again = (await store.claim("sup-b", ["h"], 1, 30.0, 3)).jobs
        after = await store.job("held")
    finally:
        await store.close()

    assert before.snoozes == 0
    assert state == "pending"
    assert [(job.key, job.attempt) for job in again] == [("held", 1)]
    assert (after.snoozes, after.attempts) == (1, 1)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
