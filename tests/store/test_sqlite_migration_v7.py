"""The SQLite store's schema 8 (the last gap between the pool's claims) from a version 7
file: its running lease is kept, and claims work and note their gaps."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.old_files import old_store_file

pytestmark = pytest.mark.anyio

async def test_a_version_7_file_keeps_its_lease_and_notes_claims(tmp_path: Path) -> None:
    db_path = tmp_path / "pool.db"
    _now, boot = old_store_file(db_path, 7)

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
