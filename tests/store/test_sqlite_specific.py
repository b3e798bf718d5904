"""What only the SQLite store has: the file, its schema version, its locking.

The behaviour shared with the Redis store is in the conformance suite beside this file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from supervisor.errors import ConfigError, StoreUnavailable
from supervisor.store.records import DispatchRequest
from supervisor.store.sql.tx import Tx
from supervisor.store.sqlite import schema as sqlite_schema
from supervisor.store.sqlite.schema import SCHEMA_VERSION
from supervisor.store.sqlite.store import SqliteStore
from tests.store.support import supervisor

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def request(key: str) -> DispatchRequest:
    return DispatchRequest(key=key, handler="h", payload=b'{"n": 1}', max_attempts=3)


@pytest.fixture
async def db_path(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "pool.db"
    store = await SqliteStore.open(url_of(path), "media")
    await store.close()
    yield path
    # A test may have made it read-only; tmp_path cleanup needs to remove it.
    await anyio.Path(path).chmod(0o644)


def pragma(path: Path, name: str) -> object:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]


async def test_file_uses_wal_mode_and_records_the_schema_version(db_path: Path) -> None:
    assert pragma(db_path, "journal_mode") == "wal"
    assert pragma(db_path, "user_version") == SCHEMA_VERSION


async def test_the_file_and_its_wal_and_shm_are_readable_by_their_owner_only(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    umask = os.umask(0o022)
    try:
        store = await SqliteStore.open(url_of(path), "media")
        await store.dispatch(request("k1"))
        created = [path, path.with_name("new.db-wal"), path.with_name("new.db-shm")]
        modes = {file.name: oct(file.stat().st_mode & 0o777) for file in created}
        await store.close()
    finally:
        os.umask(umask)
    assert modes == {file.name: "0o600" for file in created}


async def test_both_url_spellings_name_the_same_absolute_file(db_path: Path) -> None:
    for url in (f"sqlite://{db_path}", f"sqlite:///{db_path}"):
        store = await SqliteStore.open(url, "media")
        await store.dispatch(request(url))
        await store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2


async def test_records_survive_reopening(db_path: Path) -> None:
    store = await SqliteStore.open(url_of(db_path), "media")
    await store.dispatch(request("k1"))
    await store.close()
    store = await SqliteStore.open(url_of(db_path), "media")
    assert (await store.job("k1")).state == "pending"
    await store.close()


async def test_file_of_a_newer_schema_is_refused_and_left_alone(db_path: Path) -> None:
    newer = SCHEMA_VERSION + 1
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    before = await anyio.Path(db_path).read_bytes()
    with pytest.raises(ConfigError, match=rf"newer poolsup \(schema {newer}") as caught:
        await SqliteStore.open(url_of(db_path), "media")
    assert str(db_path) in caught.value.message
    assert pragma(db_path, "user_version") == newer
    assert await anyio.Path(db_path).read_bytes() == before


async def test_corrupt_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "pool.db"
    await anyio.Path(path).write_bytes(b"this is not a database, just some bytes\n" * 100)
    with pytest.raises(ConfigError, match="corrupt") as caught:
        await SqliteStore.open(url_of(path), "media")
    assert caught.value.exit_code == 2
    assert str(path) in caught.value.message
    assert "\n" not in caught.value.message


async def test_sqlite_file_of_another_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER)")
    with pytest.raises(ConfigError, match="not a poolsup store"):
        await SqliteStore.open(url_of(path), "media")


async def test_read_only_file_is_a_config_error(db_path: Path) -> None:
    await anyio.Path(db_path).chmod(0o444)
    with pytest.raises(ConfigError, match="read-only") as caught:
        await SqliteStore.open(url_of(db_path), "media")
    assert str(db_path) in caught.value.message


async def test_path_in_a_missing_directory_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "pool.db"
    with pytest.raises(ConfigError, match="does not exist") as caught:
        await SqliteStore.open(url_of(path), "media")
    assert str(path.parent) in caught.value.message
    assert not await anyio.Path(path.parent).exists()


async def test_pools_sharing_a_file_are_independent(db_path: Path) -> None:
    media = await SqliteStore.open(url_of(db_path), "media")
    mail = await SqliteStore.open(url_of(db_path), "mail")
    await media.dispatch(request("k1"))
    await mail.dispatch(request("k1"))
    claimed = await mail.claim("s1", ["h"], 5, 10.0, 3)
    assert [job.token for job in claimed.jobs] == [1]
    assert (await media.job("k1")).state == "pending"
    assert (await media.snapshot()).counts["running"] == 0
    await media.close()
    await mail.close()


@pytest.fixture
def short_busy_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_schema, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(sqlite_schema, "BUSY_RETRY_PAUSES", (0.05, 0.05))


def hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another writer that keeps the database locked for `seconds`."""
    locked = threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        threading.Event().wait(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    locked.wait()
    return thread


@pytest.mark.usefixtures("short_busy_timeout")
async def test_lock_held_past_every_retry_is_store_unavailable(db_path: Path) -> None:
    store = await SqliteStore.open(url_of(db_path), "media")
    holder = hold_write_lock(db_path, 1.0)
    with pytest.raises(StoreUnavailable, match="locked"):
        await store.dispatch(request("k1"))
    holder.join()
    await store.dispatch(request("k1"))
    await store.close()


@pytest.mark.usefixtures("short_busy_timeout")
async def test_lock_released_during_the_retries_is_waited_for(db_path: Path) -> None:
    store = await SqliteStore.open(url_of(db_path), "media")
    holder = hold_write_lock(db_path, 0.1)
    await store.dispatch(request("k1"))
    holder.join()
    await store.close()


async def test_waiting_for_a_lock_does_not_block_the_event_loop(db_path: Path) -> None:
    store = await SqliteStore.open(url_of(db_path), "media")
    holder = hold_write_lock(db_path, 0.5)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tick)
        await store.dispatch(request("k1"))
        tasks.cancel_scope.cancel()
    holder.join()
    assert ticks >= 20
    await store.close()


WORKER = """
import json, sys, anyio
from supervisor.store.records import DispatchRequest
from supervisor.store.sqlite.store import SqliteStore

async def main(url, name, rounds):
    store = await SqliteStore.open(url, "media")
    tokens, errors = [], []
    for i in range(rounds):
        try:
            await store.dispatch(DispatchRequest(key=f"{name}-{i}", handler="h",
                                                 payload=b"{}", max_attempts=1))
            batch = await store.claim(name, ["h"], 2, 30.0, 3)
            for job in batch.jobs:
                tokens.append(job.token)
                await store.renew(name, "i-1", [job.lease], 30.0, {})
                await store.complete(job.lease, b"null")
            await store.snapshot()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    await store.close()
    print(json.dumps({"tokens": tokens, "errors": errors}))

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


async def test_several_processes_share_one_file_without_lock_errors(db_path: Path) -> None:
    processes, rounds = 4, 150
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run_all() -> list[dict[str, list[object]]]:
        children = [
            subprocess.Popen([sys.executable, "-c", WORKER, url_of(db_path), f"w{n}",
                              str(rounds)], stdout=subprocess.PIPE, text=True, env=env)
            for n in range(processes)
        ]
        return [json.loads(child.communicate(timeout=90)[0]) for child in children]

    reports = await anyio.to_thread.run_sync(run_all)
    assert [report["errors"] for report in reports] == [[]] * processes
    tokens = [token for report in reports for token in report["tokens"]]
    store = await SqliteStore.open(url_of(db_path), "media")
    leftovers = await store.claim("last", ["h"], processes * rounds, 30.0, 3)
    tokens += [job.token for job in leftovers.jobs]
    assert len(tokens) == len(set(tokens)) == processes * rounds
    counts = (await store.snapshot()).counts
    assert counts["succeeded"] + counts["running"] == processes * rounds
    await store.close()


async def test_members_read_while_another_process_holds_the_write_lock(db_path: Path) -> None:
    store = await SqliteStore.open(url_of(db_path), "media")
    await store.register(supervisor("sup-a"))
    holder = hold_write_lock(db_path, 0.6)
    try:
        started = anyio.current_time()
        membership = await store.members()
        took = anyio.current_time() - started
    finally:
        holder.join()
        await store.close()
    assert took < 0.3  # it did not wait for the lock: it writes nothing
    assert [member.info.id for member in membership.members] == ["sup-a"]


async def test_a_transaction_writes_one_wake_however_many_jobs_it_frees(db_path: Path) -> None:
    """SQLite's hints are rows its supervisors poll (sqlite/tx.py): the rules of store/sql/
    tell each job made due or ended, and one `wake` row stands for them all; a stop
    keeps its own row."""
    store = await SqliteStore.open(url_of(db_path), "media")

    async def work(tx: Tx) -> None:
        await tx.requeued("h", due_now=True)
        await tx.ended("a")
        await tx.tell_holder("b", "stop")
        await tx.requeued("h", due_now=False)

    try:
        await store._db.write(work)
    finally:
        await store.close()
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT kind, key FROM events WHERE pool = 'media' ORDER BY id")
        assert rows.fetchall() == [("wake", None), ("stop", "b")]
