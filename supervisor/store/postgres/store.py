"""The PostgreSQL store: the `Store` contract on a PostgreSQL database shared by many
hosts (tables in the schema `poolsup`, created and migrated by the store itself:
schema.py), through psycopg 3's async connections on the event loop.

Every state change is one short transaction (postgres/db.py) that holds the pool's
advisory lock and reads the database's clock inside it, so that lease deadlines, due
times and schedule ticks are decided by one clock, the server's, whatever the hosts'
clocks say; the SQL lives in sql/queries.sql and sql/schema.sql.  Change hints are
NOTIFY, sent inside the transaction of the change (postgres/events.py).

The store is composed of its parts, one per group of operations, each in its own file
over one shared context (postgres/context.py), as the SQLite store is: what is left
here is opening and closing it, and the event feeds.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator

from supervisor.store.policy import NO_LOCK_DELAY_ENV
from supervisor.store.postgres import events
from supervisor.store.postgres.caller import PgCaller
from supervisor.store.postgres.claim import PgClaim
from supervisor.store.postgres.connection import Connections, conninfo, where
from supervisor.store.postgres.context import PgContext
from supervisor.store.postgres.db import STORE_TIMEOUT, PgDatabase, Tx
from supervisor.store.postgres.debug import PgDebug
from supervisor.store.postgres.dispatch import PgDispatch
from supervisor.store.postgres.leases import PgLeases
from supervisor.store.postgres.membership import PgMembership
from supervisor.store.postgres.notes import PgNotes
from supervisor.store.postgres.output import PgOutput
from supervisor.store.postgres.reads import PgReads
from supervisor.store.postgres.retry import PgRetry
from supervisor.store.postgres.steering import PgSteering
from supervisor.store.records import StoreEvent
from supervisor.store.witness import FailureWitness

# A failed call that took longer than the store's own timeout: this process stalled.
STALLED_AFTER = STORE_TIMEOUT + 1.0


def local_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


class PgStore(PgDispatch, PgClaim, PgLeases, PgSteering, PgNotes, PgOutput, PgRetry,
              PgMembership, PgReads, PgDebug, PgCaller):
    def __init__(self, db: PgDatabase, pool: str, retention: float, conninfo: str) -> None:
        self.pool = pool
        self._conninfo = conninfo
        super().__init__(PgContext(
            pool=pool, db=db, retention=retention,
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
        return events.waiting_for_end(self._ctx.db, self._conninfo, self.pool, key)

    async def ping(self) -> None:
        async def work(tx: Tx) -> None:
            await tx.value("ping")

        await self._ctx.db.read(work)

    async def close(self) -> None:
        await self._ctx.db.close()
