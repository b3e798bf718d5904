"""The SQLite store's schema 11 (the answers to `poolsup debug` requests) from a version
10 file: its jobs and their histories are kept, and a debug answer can be stored and
read."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import DispatchRequest
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio

async def test_a_version_10_file_keeps_its_jobs_and_takes_debug_answers(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    old_store_file(db_path, 10, held=False)

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        await store.dispatch(DispatchRequest(key="k", handler="h", payload=b"{}",
                                             max_attempts=3))
        await store.answer_stacks("r1", b'{"threads": []}')
        answer = await store.stacks_answer("r1", 1.0)
        events = (await store.job("k")).events
    finally:
        await store.close()

    assert answer == b'{"threads": []}'
    assert [event.event for event in events] == ["dispatched"]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
