"""The SQLite store's schema 8 (the last gap between the pool's claims) from a version 7
file: its running lease is kept, and claims work and note their gaps."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store import sqlite_db, sqlite_schema
from supervisor.store.sqlite_schema import SCHEMA_VERSION
from supervisor.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.anyio

V7_SCHEMA = Path(__file__).with_name("sqlite_schema_v7.sql")


async def test_a_version_7_file_keeps_its_lease_and_notes_claims(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V7_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 7")
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)",
                     (sqlite_schema.boot_id() or "",))
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        batch = await store.claim("sup-b", ["h"], 1, 30.0, 3)
    finally:
        await store.close()

    assert (batch.recovered, batch.jobs) == (0, ())
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        (last_claim,) = conn.execute("SELECT last_claim FROM claim_gaps").fetchone()
        deadline = conn.execute("SELECT lease_deadline FROM jobs").fetchone()[0]
    assert deadline == boot + 30
    assert last_claim >= boot
