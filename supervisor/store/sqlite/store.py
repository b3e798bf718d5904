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

The store is composed of its parts, one per group of operations, each in its own file
over one shared context (sqlite/context.py): what is left here is opening and closing
the file and the event feeds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from supervisor.store.records import StoreEvent
from supervisor.store.sqlite import db as sqlite_db
from supervisor.store.sqlite.claim import SqliteClaim
from supervisor.store.sqlite.context import SqliteContext
from supervisor.store.sqlite.db import SqliteDatabase
from supervisor.store.sqlite.debug import SqliteDebug
from supervisor.store.sqlite.dispatch import SqliteDispatch
from supervisor.store.sqlite.events import EventPoller, JobEndPoll
from supervisor.store.sqlite.leases import SqliteLeases
from supervisor.store.sqlite.membership import SqliteMembership
from supervisor.store.sqlite.notes import SqliteNotes
from supervisor.store.sqlite.output import SqliteOutput
from supervisor.store.sqlite.reads import SqliteReads
from supervisor.store.sqlite.retry import SqliteRetry
from supervisor.store.sqlite.schema import BUSY_RETRY_PAUSES, BUSY_TIMEOUT_MS, open_connection
from supervisor.store.sqlite.steering import SqliteSteering
from supervisor.store.witness import FailureWitness

# A failed write that took longer than SQLite's own waits for a lock: this process stalled.
STALLED_AFTER = BUSY_TIMEOUT_MS / 1000 + sum(BUSY_RETRY_PAUSES) + 1.0


class SqliteStore(SqliteDispatch, SqliteClaim, SqliteLeases, SqliteSteering, SqliteNotes,
                  SqliteOutput, SqliteRetry, SqliteMembership, SqliteReads, SqliteDebug):
    def __init__(self, db: SqliteDatabase, pool: str, retention: float) -> None:
        self.pool = pool
        super().__init__(SqliteContext(
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
        after = await self._ctx.db.read(lambda tx: int(tx.value("last_event_id")))
        yield EventPoller(self._ctx.db, after)

    async def ping(self) -> None:
        await self._ctx.db.read(lambda tx: tx.value("ping"))

    async def close(self) -> None:
        await self._ctx.db.close()
