"""The SQLite store: the `Store` contract on one file, for one host.

Several supervisor processes and CLI commands may use the file at once: every state
change is one short `BEGIN IMMEDIATE` transaction (sqlite/db.py), and the store's clocks
are this host's, read inside it.  The SQL lives in sql/queries.sql.

Two clocks.  Lease deadlines and supervisors' last_seen count on CLOCK_BOOTTIME, which
never steps and runs on through a suspend: a step of the wall clock can then neither
expire a live lease (two holders of one job) nor keep a dead one.  What users read
(created_at, started_at, finished_at, the health times) and `due` (when a pending job
becomes claimable) stay on the wall clock: a step only moves when a held-back job
runs, it never runs a job twice.  A delayed job's `run_at` is a wall-clock time the
user chose, so it is due when the wall clock reaches it (`due` = max(now, run_at)),
as a retry backoff is; schedule ticks compare `not_before` with the wall clock too.
Records show boot-clock deadlines as wall-clock times (Tx.wall_time).  The "held 3
ttls" test of `renew` uses started_at, so a step may reset a job's count of lease
losses early, never hand its lease out.

The store is composed of the SQL stores' parts, one per group of operations, each in
its own file of store/sql/ over one shared context (sql/context.py), whose rules run
over SQLite's `Tx` (sqlite/tx.py): what is left here is opening and closing the file
and the event feeds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from supervisor.store.records import StoreEvent
from supervisor.store.sql.claim import SqlClaim
from supervisor.store.sql.context import SqlContext
from supervisor.store.sql.debug import SqlDebug
from supervisor.store.sql.dispatch import SqlDispatch
from supervisor.store.sql.leases import SqlLeases
from supervisor.store.sql.membership import SqlMembership
from supervisor.store.sql.notes import SqlNotes
from supervisor.store.sql.output import SqlOutput
from supervisor.store.sql.retry import SqlRetry
from supervisor.store.sql.steering import SqlSteering
from supervisor.store.sql.tx import Tx
from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite.db import SqliteDatabase
from supervisor.store.sqlite.events import EventPoller, JobEndPoll
from supervisor.store.sqlite.schema import BUSY_RETRY_PAUSES, BUSY_TIMEOUT_MS, open_connection
from supervisor.store.witness import FailureWitness

# A failed write that took longer than SQLite's own waits for a lock: this process stalled.
STALLED_AFTER = BUSY_TIMEOUT_MS / 1000 + sum(BUSY_RETRY_PAUSES) + 1.0


class SqliteStore(SqlDispatch, SqlClaim, SqlLeases, SqlSteering, SqlNotes, SqlOutput,
                  SqlRetry, SqlMembership, SqlDebug):
    def __init__(self, db: SqliteDatabase, pool: str, retention: float) -> None:
        self.pool = pool
        self._db = db
        super().__init__(SqlContext(
            pool=pool, db=db, retention=retention,
            # Lease deadlines count on the boot clock: so does what this process saw failing.
            witness=FailureWitness(lambda: sqlite_db.boot_clock(), max_wait=STALLED_AFTER)))

    @classmethod
    async def open(cls, url: str, pool: str, retention: float = 86400.0) -> SqliteStore:
        conn, path = await anyio.to_thread.run_sync(
            open_connection, url, pool, sqlite_db.read_clocks)
        return cls(SqliteDatabase(conn, path, pool), pool, retention)

    def events(
        self, supervisor_id: str,
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return self._subscribe()

    @contextlib.asynccontextmanager
    async def job_ends(self, key: str) -> AsyncIterator[AsyncIterator[StoreEvent]]:
        yield JobEndPoll()

    @contextlib.asynccontextmanager
    async def _subscribe(self) -> AsyncIterator[AsyncIterator[StoreEvent]]:
        async def last_event_id(tx: Tx) -> int:
            return int(await tx.value("last_event_id"))

        yield EventPoller(self._db, await self._db.read(last_event_id))

    async def ping(self) -> None:
        await self._db.read(lambda tx: tx.value("ping"))

    async def close(self) -> None:
        await self._db.close()
