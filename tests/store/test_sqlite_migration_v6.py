"""The SQLite store's schema 7 (the machines that used the file during its boot) from a
version 6 file: the same boot keeps every lease, another boot is still a reboot."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite import schema as sqlite_schema
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore

pytestmark = pytest.mark.anyio

V6_SCHEMA = Path(__file__).with_name("sqlite_schema_v6.sql")


def version_6_file(path: Path, file_boot: str) -> float:
    """A version 6 file with one running lease, counting on `file_boot`; its deadline
    on the boot clock."""
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(path) as conn:
        conn.executescript(V6_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 6")
        conn.execute("INSERT INTO host (id, boot_id) VALUES (1, ?)", (file_boot,))
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))
    return boot + 30


def boot_deadline(path: Path) -> float:
    with sqlite3.connect(path) as conn:
        return float(conn.execute("SELECT lease_deadline FROM jobs").fetchone()[0])


async def test_a_version_6_file_of_this_boot_keeps_its_leases_and_learns_the_machine(
    tmp_path: Path,
) -> None:
    db_path = tmp_path / "pool.db"
    deadline = version_6_file(db_path, sqlite_schema.boot_id() or "")

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    await store.close()

    assert boot_deadline(db_path) == deadline
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        machines = [row[0] for row in conn.execute("SELECT machine_id FROM host_machines")]
    assert machines == ([] if sqlite_schema.machine_id() is None
                        else [sqlite_schema.machine_id()])


async def test_a_version_6_file_of_an_earlier_boot_has_its_leases_expired(
    tmp_path: Path,
) -> None:
    if sqlite_schema.boot_id() is None:
        pytest.skip("this host does not say its boot id")
    db_path = tmp_path / "pool.db"
    version_6_file(db_path, "an-earlier-boot")

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    await store.close()

    assert boot_deadline(db_path) == 0
