"""One SQLite connection used from worker threads, one short transaction per call, in
which a rule of store/sql/ runs over a `Tx` (tx.py), driven to its end by the thread
(drive.py).

The event loop never touches the connection: every call runs in a worker thread, one
at a time (`store.turns.Turns`, and a lock for `close`), the lease renewal ahead of every other call
waiting (`write(..., first=True)`).  Writes take the write
lock up front (`BEGIN IMMEDIATE`) so that no transaction has to upgrade a read lock,
which SQLite cannot wait for.  Driver errors become `StoreUnavailable` here.

Each transaction reads two clocks once it holds its lock: `wall_clock` (epoch seconds)
and `boot_clock` (CLOCK_BOOTTIME).  They are module attributes, looked up at every
transaction, so that tests can step one of them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from supervisor.errors import StoreUnavailable
from supervisor.store.sql.tx import Work
from supervisor.store.sqlite.drive import run_to_end
from supervisor.store.sqlite.schema import BUSY_TIMEOUT_MS, is_busy, retry_when_busy
from supervisor.store.sqlite.tx import Tx
from supervisor.store.turns import Turns

_T = TypeVar("_T")
WALL_OFFSET_SLACK = 0.005


def wall_clock() -> float:
    return time.time()


def boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def read_clocks() -> tuple[float, float]:
    """(wall, boot) now, through the module attributes."""
    return wall_clock(), boot_clock()


class SqliteDatabase:
    def __init__(self, conn: sqlite3.Connection, path: Path, pool: str) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._path = path
        self._pool = pool
        self._lock = threading.Lock()
        self._turns = Turns(1)
        self._wall_offset = 0.0

    async def write(self, work: Work[_T], *, pool_lock: bool = True,
                    first: bool = False) -> _T:
        """Run `work` in one `BEGIN IMMEDIATE` transaction, in a worker thread (every
        write is one after another: `pool_lock` changes nothing); with `first`, ahead of
        the calls waiting."""
        return await self._in_turn(work, True, first)

    async def read(self, work: Work[_T]) -> _T:
        """Run `work` in one read transaction (one consistent view), in a worker thread."""
        return await self._in_turn(work, False, False)

    async def _in_turn(self, work: Work[_T], immediate: bool, first: bool) -> _T:
        async with self._turns.turn(first=first):
            # Shielded: a cancelled caller's transaction still ends before the next one.
            with anyio.CancelScope(shield=True):
                result = await anyio.to_thread.run_sync(self._run, work, immediate)
            return result

    @property
    def path(self) -> Path:
        return self._path

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def close(self) -> None:
        async with self._turns.turn(first=True):
            await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _run(self, work: Work[_T], immediate: bool) -> _T:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreUnavailable(f"SQLite store {self._path}: the store is closed")
            try:
                return retry_when_busy(lambda: self._transaction(conn, work, immediate))
            except sqlite3.Error as exc:
                raise self._unavailable(exc) from exc

    def _transaction(self, conn: sqlite3.Connection, work: Work[_T], immediate: bool) -> _T:
        conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            # The clock is read once the write lock is held, so store times follow the
            # order of the transactions of every process that shares the file.
            wall, boot = read_clocks()
            # The rule is a coroutine over a Tx that never suspends: run here, to its end.
            result = run_to_end(work(Tx(conn, self._pool, wall, boot,
                                        self._offset(wall - boot))))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    def _offset(self, measured: float) -> float:
        """wall - boot, kept while it stays within WALL_OFFSET_SLACK: reading the two
        clocks one after the other adds a jitter of microseconds, and a record read
        twice should show one deadline."""
        if abs(measured - self._wall_offset) > WALL_OFFSET_SLACK:
            self._wall_offset = measured
        return self._wall_offset

    def _unavailable(self, exc: sqlite3.Error) -> StoreUnavailable:
        if is_busy(exc):
            return StoreUnavailable(
                f"SQLite store {self._path}: the database stayed locked by another process "
                f"(waited {BUSY_TIMEOUT_MS} ms, several times)")
        return StoreUnavailable(f"SQLite store {self._path}: {exc}")
