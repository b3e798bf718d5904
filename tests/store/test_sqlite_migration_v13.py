"""The SQLite store's schema 14 (schedules their producer ended) from a version 13 file:
a schedule fired before keeps its record, and can end and start again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.records import FiredTick, TickRequest
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import POOL, old_store_file

pytestmark = pytest.mark.anyio

TICK = 1_700_000_000.0


def fire(tick: float, fingerprint: str = "fp-1") -> TickRequest:
    return TickRequest(schedule="feeds", tick=tick, not_before=tick, fingerprint=fingerprint,
                       owner="sup-a")


async def test_a_version_13_file_keeps_its_schedule_which_can_end(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    now, _ = old_store_file(db_path, 13)
    with sqlite3.connect(db_path) as conn:
        conn.execute("INSERT INTO schedules (pool, name, last_tick, fingerprint, fired_by, "
                     "fired_at, outcome, fires) VALUES (?, 'feeds', ?, 'fp-1', 'sup-a', ?, "
                     "'applied', 3)", (POOL, TICK, now))

    store = await SqliteStore.open(f"sqlite:///{db_path}", POOL, retention=60.0)
    try:
        (before,) = (await store.schedules()).schedules
        assert (await store.fire_tick(fire(TICK + 60))).outcome == "fired"
        assert await store.record_tick_outcome(
            FiredTick(schedule="feeds", tick=TICK + 60, owner="sup-a"), "applied", b"{}",
            end=True)
        refused = await store.fire_tick(fire(TICK + 120))
        restarted = await store.fire_tick(fire(TICK + 120, "fp-2"))
    finally:
        await store.close()

    assert (before.fires, before.ended_at, before.ended_tick) == (3, None, None)
    assert (refused.outcome, restarted.outcome) == ("ended", "fired")
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
