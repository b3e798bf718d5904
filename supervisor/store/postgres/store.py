"""The PostgreSQL store: the `Store` contract on a PostgreSQL database shared by many
hosts (tables in the schema `poolsup`, created and migrated by the store itself:
schema.py), through psycopg 3's async connections on the event loop.

Every state change is one short transaction (postgres/db.py) that holds the pool's
advisory lock and reads the database's clock inside it, so that lease deadlines, due
times and schedule ticks are decided by one clock, the server's, whatever the hosts'
clocks say; the SQL lives in sql/queries.sql and sql/schema.sql.  Change hints are
NOTIFY, sent inside the transaction of the change (postgres/events.py).

The store is composed of the SQL stores' parts, one per group of operations, each in its
own file of store/sql/ over one shared context (sql/context.py), as the SQLite store
is, whose rules run over PostgreSQL's `Tx` (postgres/tx.py); PostgreSQL's own parts
override a few operations (claim.py, dispatch.py, reads.py) and add the caller's
connection (caller.py).  What is left here is opening and closing it, and the event
feeds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator

from supervisor.store.policy import NO_LOCK_DELAY_ENV
from supervisor.store.postgres import events
from supervisor.store.postgres.caller import PgCaller
from supervisor.store.postgres.claim import DROP_EVERY, PgClaim
from supervisor.store.postgres.connection import Connections, conninfo, where
from supervisor.store.postgres.db import STORE_TIMEOUT, PgDatabase
from supervisor.store.postgres.dispatch import PgDispatch
from supervisor.store.postgres.reads import PgReads
from supervisor.store.records import StoreEvent
from supervisor.store.sql.context import SqlContext
from supervisor.store.sql.debug import SqlDebug
from supervisor.store.sql.leases import SqlLeases
from supervisor.store.sql.membership import SqlMembership
from supervisor.store.sql.notes import SqlNotes
from supervisor.store.sql.output import SqlOutput
from supervisor.store.sql.retry import SqlRetry
from supervisor.store.sql.steering import SqlSteering
from supervisor.store.sql.tx import Tx
from supervisor.store.witness import FailureWitness

# A failed call that took longer than the store's own timeout: this process stalled.
STALLED_AFTER = STORE_TIMEOUT + 1.0


def local_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class PgStore(PgReads, PgDispatch, PgClaim, SqlLeases, SqlSteering, SqlNotes, SqlOutput,
              SqlRetry, SqlMembership, SqlDebug, PgCaller):
    def __init__(self, db: PgDatabase, pool: str, retention: float, conninfo: str) -> None:
        self.pool = pool
        self._conninfo = conninfo
        self._db = db
        super().__init__(SqlContext(
            pool=pool, db=db, retention=retention, drop_every=DROP_EVERY,
            witness=FailureWitness(local_clock, max_wait=STALLED_AFTER),
            no_lock_delay=os.environ.get(NO_LOCK_DELAY_ENV) == "1"))

    @classmethod
    async def open(cls, url: str, pool: str, retention: float = 86400.0) -> PgStore:
        info = conninfo(url)
        # Nothing connects yet: a store that cannot be reached now is opened all the same,
        # and its calls fail (StoreUnavailable) until it answers.
        return cls(PgDatabase(Connections(info, url), pool, where(url)), pool, retention, info)

    @property
    def retention(self) -> float:
        return self._ctx.retention

    def events(
        self, supervisor_id: str,
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return events.listening(self._conninfo, self.pool, [supervisor_id, events.POOL_CHANNEL])

    def job_ends(self, key: str) -> contextlib.AbstractAsyncContextManager[
            AsyncIterator[StoreEvent]]:
        return events.waiting_for_end(self._db, self._conninfo, self.pool, key)

    async def ping(self) -> None:
        async def work(tx: Tx) -> None:
            await tx.value("ping")

        await self._db.read(work)

    async def close(self) -> None:
        await self._db.close()
