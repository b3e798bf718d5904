"""The SQLite store's schema 5 (delayed jobs, schedules) from a version 4 file."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from supervisor.store.records import DispatchRequest, Lease, TickRequest
from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore

pytestmark = pytest.mark.anyio

V4_SCHEMA = Path(__file__).with_name("sqlite_schema_v4.sql")


async def test_a_version_4_file_is_migrated_and_takes_delays_and_schedules(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V4_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 4")
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, max_attempts, payload, created_at, "
            "due) VALUES ('media', 'waiting', 'h', 'pending', 3, x'7b7d', ?, ?)",
            (now - 10, now - 10))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        waiting = await store.job("waiting")
        assert (waiting.state, waiting.run_at, waiting.schedule) == ("pending", None, None)
        await store.dispatch(DispatchRequest(key="later", handler="h", payload=b"{}",
                                             max_attempts=1, run_at=time.time() + 60,
                                             schedule="feeds"))
        batch = await store.claim("sup-b", ["h"], 5, 30.0, 3)
        assert [job.key for job in batch.jobs] == ["waiting"]
        assert batch.next_due_in == pytest.approx(60, abs=1)
        assert await store.live_keys_of_schedule("feeds") == ["later"]
        tick = await store.fire_tick(TickRequest(schedule="feeds", tick=now, not_before=now,
                                                 fingerprint="fp", owner="sup-b"))
        assert tick.outcome == "fired"
        assert [r.name for r in (await store.schedules()).schedules] == ["feeds"]
        await store.complete(Lease("held", 5, "sup-a"), b"1")
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        assert {"run_at", "schedule"} <= columns
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"schedules", "jobs_by_schedule"} <= names
