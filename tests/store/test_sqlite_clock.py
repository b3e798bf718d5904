"""The SQLite store's clocks: leases run on CLOCK_BOOTTIME, so neither a step of the
wall clock nor a reboot of the host can leave two holders of one lease."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

import pytest

from supervisor.store.policy import JUDGE_AFTER_GAP
from supervisor.store.records import DispatchRequest, Lease
from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.support import supervisor

pytestmark = pytest.mark.anyio

V1_SCHEMA = Path(__file__).with_name("sqlite_schema_v1.sql")
V2_SCHEMA = Path(__file__).with_name("sqlite_schema_v2.sql")
V3_SCHEMA = Path(__file__).with_name("sqlite_schema_v3.sql")
MOVE_COLUMNS = ("reserved_for", "reserved_until", "moved_from")


def request(key: str) -> DispatchRequest:
    return DispatchRequest(key=key, handler="h", payload=b'{"n": 1}', max_attempts=3)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "pool.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    yield store
    await store.close()


async def test_a_forward_step_of_the_wall_clock_expires_no_lease(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.dispatch(request("k1"))
    (held,) = (await store.claim("sup-a", ["h"], 1, 30.0, 3)).jobs

    monkeypatch.setattr(sqlite_db, "wall_clock", lambda: time.time() + 3600)
    batch = await store.claim("sup-b", ["h"], 1, 30.0, 3)

    assert (batch.recovered, batch.jobs) == (0, ())
    record = await store.job("k1")
    assert (record.state, record.supervisor, record.token) == ("running", "sup-a", held.token)
    assert record.lease_deadline is not None
    assert record.lease_deadline - (time.time() + 3600) == pytest.approx(30, abs=1)

    # The lease does run on the boot clock.
    boot = sqlite_db.boot_clock
    monkeypatch.setattr(sqlite_db, "boot_clock", lambda: boot() + 31)
    # Nobody claimed for 31 s: the lease is left to a witness of that gap for a while.
    assert (await store.claim("sup-b", ["h"], 1, 30.0, 3)).recovered == 0
    monkeypatch.setattr(sqlite_db, "boot_clock", lambda: boot() + 31 + JUDGE_AFTER_GAP)
    batch = await store.claim("sup-b", ["h"], 1, 30.0, 3)
    assert batch.recovered == 1 and [job.owner for job in batch.jobs] == ["sup-b"]
    # The failover time (start - lease_expired_at) counts on the boot clock too.
    (again,) = batch.jobs
    assert again.lease_expired_at is not None
    assert again.lease_deadline - 30.0 - again.lease_expired_at == pytest.approx(
        1 + JUDGE_AFTER_GAP, abs=0.5)


async def test_a_wall_clock_step_keeps_a_live_supervisor_in_the_snapshot(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.register(supervisor("sup-a", lease_ttl=1.0))

    monkeypatch.setattr(sqlite_db, "wall_clock", lambda: time.time() + 3600)

    (status,) = (await store.snapshot()).supervisors
    assert status.last_seen < 1


async def test_a_reboot_of_the_host_expires_every_running_lease(db_path: Path) -> None:
    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    await store.register(supervisor("sup-a", instance="i-1"))
    await store.dispatch(request("k1"))
    await store.claim("sup-a", ["h"], 1, 30.0, 3)
    await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("UPDATE host SET boot_id = 'an-earlier-boot'").rowcount == 1

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        batch = await store.claim("sup-b", ["h"], 1, 30.0, 3)
        assert batch.recovered == 1 and [job.owner for job in batch.jobs] == ["sup-b"]
        # A deadline on the clock of another boot says nothing about when it expired.
        assert batch.jobs[0].lease_expired_at is None
        await store.register(supervisor("sup-a", instance="i-2"))
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT boot_id FROM host").fetchone()[0] != "an-earlier-boot"


async def test_a_version_1_file_is_migrated_with_its_leases_kept(db_path: Path) -> None:
    now = time.time()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V1_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 1")
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, now + 30))
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, max_attempts, payload, created_at, "
            "due) VALUES ('media', 'waiting', 'h', 'pending', 3, x'7b7d', ?, ?)",
            (now - 10, now - 10))
        conn.execute(
            "INSERT INTO supervisors (pool, id, instance, info, lease_ttl, last_seen) "
            "VALUES ('media', 'sup-a', 'i-1', ?, 10.0, ?)",
            (json.dumps(asdict(supervisor("sup-a", instance="i-1", lease_ttl=10.0))), now))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        batch = await store.claim("sup-b", ["h"], 5, 30.0, 3)
        assert (batch.recovered, [job.key for job in batch.jobs]) == (0, ["waiting"])
        assert batch.jobs[0].token == 6
        held = await store.job("held")
        assert (held.state, held.supervisor) == ("running", "sup-a")
        assert held.lease_deadline == pytest.approx(now + 30, abs=1)
        lease = Lease("held", held.token, "sup-a")
        renewal = await store.renew("sup-a", "i-1", [lease], 30.0, {})
        assert (renewal.lost, renewal.membership) == (frozenset(), "ok")
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert {"jobs_queue_by_priority", "jobs_reserved"} <= indexes
        assert {"checkpoint", "checkpoint_at", *MOVE_COLUMNS} <= _job_columns(conn)


async def test_a_version_2_file_is_migrated_and_takes_checkpoints(db_path: Path) -> None:
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V2_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 2")
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline) VALUES "
            "('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', x'7b7d', ?, ?, ?)",
            (now - 10, now - 5, boot + 30))
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, result, created_at, started_at, finished_at) VALUES "
            "('media', 'done', 'h', 'succeeded', 1, 3, 4, 'sup-a', x'7b7d', x'31', ?, ?, ?)",
            (now - 20, now - 15, now - 12))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        done = await store.job("done")
        assert (done.state, done.result, done.checkpoint, done.checkpoint_at) == (
            "succeeded", 1, None, None)
        held = Lease("held", 5, "sup-a")
        assert (await store.job("held")).lease_deadline == pytest.approx(now + 30, abs=1)
        await store.save_checkpoint(held, b'{"offset": 7}')
        await store.release(held)
        (again,) = (await store.claim("sup-b", ["h"], 1, 30.0, 3)).jobs
        assert (again.key, again.token, again.checkpoint) == ("held", 6, b'{"offset": 7}')
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert {"checkpoint", "checkpoint_at"} <= _job_columns(conn)


async def test_a_version_3_file_is_migrated_and_takes_moves(db_path: Path) -> None:
    now, boot = sqlite_db.read_clocks()
    with sqlite3.connect(db_path) as conn:
        conn.executescript(V3_SCHEMA.read_text())
        conn.execute("PRAGMA user_version = 3")
        conn.execute("INSERT INTO counters (pool, token) VALUES ('media', 5)")
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, attempts, max_attempts, token, "
            "supervisor, payload, created_at, started_at, lease_deadline, checkpoint, "
            "checkpoint_at) VALUES ('media', 'held', 'h', 'running', 1, 3, 5, 'sup-a', "
            "x'7b7d', ?, ?, ?, x'37', ?)",
            (now - 10, now - 5, boot + 30, now - 1))
        conn.execute(
            "INSERT INTO jobs (pool, key, handler, state, max_attempts, payload, created_at, "
            "due) VALUES ('media', 'waiting', 'h', 'pending', 3, x'7b7d', ?, ?)",
            (now - 10, now - 10))
        # An entry as version 3 wrote it: no handlers, no rebalance.
        entry = {name: value for name, value in asdict(supervisor("sup-a")).items()
                 if name not in ("handlers", "rebalance")}
        conn.execute(
            "INSERT INTO supervisors (pool, id, instance, info, lease_ttl, last_seen) "
            "VALUES ('media', 'sup-a', 'i-1', ?, 30.0, ?)", (json.dumps(entry), boot))

    store = await SqliteStore.open(f"sqlite:///{db_path}", "media")
    try:
        (member,) = (await store.members()).members
        assert (member.info, member.running_by_handler) == (supervisor("sup-a"), {"h": 1})
        waiting = await store.job("waiting")
        assert (waiting.state, waiting.reserved_for, waiting.moved_from) == (
            "pending", None, None)
        await store.release(Lease("held", 5, "sup-a"), reserve_for="sup-b", reserve_ttl=30.0)
        assert [r.key for r in (await store.snapshot()).moving] == ["held"]
        (moved,) = (await store.claim("sup-b", ["h"], 1, 30.0, 3)).jobs
        assert (moved.key, moved.token, moved.checkpoint) == ("held", 6, b"7")
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert set(MOVE_COLUMNS) <= _job_columns(conn)


def _job_columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}



async def test_a_delayed_job_is_due_by_the_wall_clock(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.dispatch(DispatchRequest(key="later", handler="h", payload=b"{}",
                                         max_attempts=1, run_at=time.time() + 600))
    assert (await store.claim("sup-a", ["h"], 1, 30.0, 3)).jobs == ()

    monkeypatch.setattr(sqlite_db, "wall_clock", lambda: time.time() + 601)
    (job,) = (await store.claim("sup-a", ["h"], 1, 30.0, 3)).jobs

    assert job.key == "later"
