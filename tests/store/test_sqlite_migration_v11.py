"""The SQLite store's schema 12 (each run's output, `poolsup logs`) from a version 11
file: its running job is kept and its run's output can be stored, read, and goes with
the record."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import DispatchRequest, Lease
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio


async def test_a_version_11_file_keeps_its_running_job_and_takes_its_output(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    old_store_file(db_path, 11)
    held = Lease("held", 5, "sup-a")

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media", retention=0.0)
    try:
        await store.append_output(held, 1, b"printed\n", at=0, max_bytes=1000)
        runs = await store.output("held")
        await store.complete(held, b"1")
        await store.dispatch(DispatchRequest(key="held", handler="h", payload=b"{}",
                                             max_attempts=3))
        after = await store.output("held")
    finally:
        await store.close()

    assert [(r.token, r.attempt, r.supervisor, r.data) for r in runs] == [
        (5, 1, "sup-a", b"printed\n")]
    assert after == []
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("SELECT count(*) FROM output_chunks").fetchone()[0] == 0
