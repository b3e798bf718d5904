"""The SQLite store's schema 15 (the trace context a dispatch keeps, docs/tracing.md) from a
version 14 file: its running job is kept, without a trace context, and a new dispatch keeps
one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import DispatchRequest, Lease
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_version_14_file_keeps_its_running_job_and_takes_trace_contexts(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    old_store_file(db_path, 14)
    held = Lease("held", 5, "sup-a")

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media", retention=0.0)
    try:
        await store.release(held)
        again = (await store.claim("sup-b", ["h"], 1, 30.0, 3)).jobs
        await store.dispatch(DispatchRequest(key="traced", handler="h", payload=b"{}",
                                             max_attempts=3, traceparent=PARENT,
                                             tracestate="k=v"))
        traced = (await store.claim("sup-b", ["h"], 1, 30.0, 3)).jobs
    finally:
        await store.close()

    assert [(j.key, j.traceparent, j.tracestate) for j in again] == [("held", None, None)]
    assert [(j.key, j.traceparent, j.tracestate) for j in traced] == [
        ("traced", PARENT, "k=v")]
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 15
