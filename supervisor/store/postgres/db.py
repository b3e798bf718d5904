"""The PostgreSQL store's transactions: psycopg 3 async connections (connection.py
`Connections`), one short transaction per call, on the event loop (no thread, no
blocking call).

A write first takes the pool's transaction-scoped advisory lock, then reads the
database's clock: every write of a pool is one step after another, as SQLite's `BEGIN
IMMEDIATE` makes them, and store times follow that order.  Pools sharing a database
never wait for each other.  (Why one lock per pool, and what skips it: the dispatch,
docs/stores.md "PostgreSQL".)  Reads take no lock and see one snapshot (REPEATABLE READ).

Driver errors (a connection refused, a password refused, ...) and a call the server
leaves unanswered for STORE_TIMEOUT seconds become `StoreUnavailable` here, in one line
that names the server with its password hidden.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import anyio
import psycopg
from psycopg import IsolationLevel
from psycopg.rows import DictRow

from supervisor.errors import StoreUnavailable
from supervisor.store.postgres.connection import POOL_SIZE, Connections
from supervisor.store.postgres.schema import ensure_schema, load_queries
from supervisor.store.postgres.tx import Connection, Tx
from supervisor.store.sql.tx import Work

_T = TypeVar("_T")
log = logging.getLogger("poolsup.store")

STORE_TIMEOUT = 5.0  # seconds a transaction may take before the store counts as failing
# A write that waited LOCK_WAIT for the pool's lock (connection.py) looks for a holder
# whose transaction began this long ago or more, ends it, and tries again: the store's
# transactions take milliseconds, so such a holder's client froze inside one.
STUCK_AFTER = 2.0

STANDBY = ("is a read-only standby (pg_is_in_recovery()); claims, renewals and every write "
           "go to the primary only")


class StaleConnection(Exception):
    """A pooled connection was found closed before its transaction began."""

    def __init__(self, error: psycopg.OperationalError) -> None:
        super().__init__(str(error))
        self.error = error


class PgDatabase:
    def __init__(self, pool: Connections, name: str, where: str) -> None:
        self._pool = pool
        self._name = name
        self._where = where  # the server, as errors name it (password hidden)
        self._closed = False
        self._ready = False  # the schema was checked, and the pool's counter row made

    @property
    def where(self) -> str:
        return self._where

    @property
    def closed(self) -> bool:
        return self._closed

    async def write(self, work: Work[_T], *, pool_lock: bool = True, first: bool = False) -> _T:
        """Run `work` in one transaction on the primary, holding the pool's lock unless
        told not to (a dispatch: sql/schema.sql dispatch_jobs); with `first`, ahead of
        the calls waiting for a connection (a renewal)."""
        return await self._transaction(work, writes=True, pool_lock=pool_lock, first=first)

    async def read(self, work: Work[_T]) -> _T:
        """Run `work` in one read transaction (one snapshot), without the pool's lock."""
        return await self._transaction(work, writes=False, pool_lock=False)

    async def read_one(self, query: str, **params: Any) -> list[DictRow]:
        """The rows of one read statement (a name of sql/queries.sql; the pool bound in),
        run on its own: one snapshot, one round trip, no BEGIN or COMMIT."""
        return await self._one(query, params, writes=False)

    async def write_one(self, query: str, **params: Any) -> list[DictRow]:
        """As `read_one`, for a write that needs neither the pool's lock nor the
        transaction's store time (a dispatch: its function reads the clock itself); a
        standby refuses it (the primary only takes writes)."""
        return await self._one(query, params, writes=True)

    async def _one(self, query: str, params: dict[str, Any], *, writes: bool) -> list[DictRow]:
        if not self._ready:  # the schema is made or checked first, in a transaction
            return await self._transaction(lambda tx: tx.rows(query, **params),
                                           writes=writes, pool_lock=False)
        if self._closed:
            raise StoreUnavailable(f"{self._where}: the store is closed")
        statement = load_queries()[query]
        try:
            async with self._pool.turn(), self._timeout(), self._pool.connection() as conn:
                await conn.set_autocommit(True)
                try:
                    cursor = await conn.execute(statement, {"pool": self._name, **params})
                    return await cursor.fetchall()
                finally:
                    # A statement cut short leaves the connection busy: it cannot be
                    # switched back, and the pool closes it instead of keeping it.
                    if not conn.closed:
                        with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                            await conn.set_autocommit(False)
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"{self._where}: no answer within {STORE_TIMEOUT:g} s") from exc
        except psycopg.errors.ReadOnlySqlTransaction as exc:
            raise StoreUnavailable(f"{self._where}: {STANDBY}") from exc
        except psycopg.Error as exc:
            raise self.unavailable(exc) from exc

    async def _transaction(self, work: Work[_T], *, writes: bool, pool_lock: bool,
                           first: bool = False) -> _T:
        if self._closed:
            raise StoreUnavailable(f"{self._where}: the store is closed")
        try:
            # The timeout is the server's: it runs once the call has its turn.
            async with self._pool.turn(first=first), self._timeout():
                # Each idle connection of the pool may have been closed by a restart;
                # a lock waited for LOCK_WAIT may be held by a frozen client (until the
                # call's timeout).
                stale_tries = POOL_SIZE
                while True:
                    try:
                        return await self._attempt(work, writes=writes, pool_lock=pool_lock)
                    except StaleConnection as stale:
                        if not stale_tries:
                            raise stale.error from None
                        stale_tries -= 1
                    except psycopg.errors.LockNotAvailable:
                        await self._end_stuck_lock_holder()
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"{self._where}: no answer within {STORE_TIMEOUT:g} s") from exc
        except psycopg.Error as exc:
            raise self.unavailable(exc) from exc

    async def _end_stuck_lock_holder(self) -> bool:
        """End the session stuck holding the pool's lock (sql/queries.sql
        end_stuck_lock_holder); whether there was one."""
        rows = await self._one("end_stuck_lock_holder", {
            "lock": f"poolsup:{self._name}", "stuck_after": STUCK_AFTER}, writes=True)
        ended = int(rows[0]["ended"]) if rows else 0
        if ended:
            log.warning("ended the session that held pool %s's lock for %g s or more "
                        "(its supervisor froze inside a transaction)", self._name, STUCK_AFTER)
        return ended > 0

    @contextlib.asynccontextmanager
    async def _timeout(self) -> AsyncIterator[None]:
        with anyio.fail_after(STORE_TIMEOUT):
            yield

    async def _attempt(self, work: Work[_T], *, writes: bool, pool_lock: bool) -> _T:
        """One try.  A connection the server closed while it was idle in the pool (a
        restart, AdminShutdown) fails at the first statement, before anything of the work
        ran: `StaleConnection`, and the transaction is tried again on another."""
        async with self._pool.connection() as conn:
            await conn.set_isolation_level(
                IsolationLevel.READ_COMMITTED if writes else IsolationLevel.REPEATABLE_READ)
            try:
                # Pipelined: a statement whose answer the work does not read (a history
                # event, a NOTIFY) goes out with the next one instead of a round trip.
                # (The schema's scripts, several statements each, cannot be.)
                if not self._ready:
                    try:
                        await self._prepare(conn, writes)
                    except psycopg.OperationalError as exc:
                        raise StaleConnection(exc) from exc
                async with conn.pipeline():
                    try:
                        now = await self._begin(conn, pool_lock, writes)
                    except psycopg.errors.LockNotAvailable:
                        raise
                    except psycopg.OperationalError as exc:
                        raise StaleConnection(exc) from exc
                    result = await work(Tx(conn, self._name, now))
                    await conn.commit()
            except StaleConnection:
                # Nothing ran yet; the connection is dropped, not given back.
                with anyio.CancelScope(shield=True):
                    await conn.close()
                raise
            except BaseException:
                if not conn.closed:
                    with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                        await conn.rollback()
                raise
            self._ready = self._ready or writes
            return result

    async def _prepare(self, conn: Connection, writes: bool) -> None:
        """The first write of this store creates or migrates the schema, and the pool's
        counter; a read before it checks the schema's version only (a standby takes no
        write)."""
        if writes:
            cursor = await conn.execute("SELECT pg_is_in_recovery() AS standby")
            self._refuse_standby(await cursor.fetchone())
        await ensure_schema(conn, self._where)
        if writes:
            await conn.execute(load_queries()["ensure_counters"], {"pool": self._name})

    async def _begin(self, conn: Connection, pool_lock: bool, writes: bool) -> float:
        """The transaction's store time, once it holds the pool's lock (a write that takes
        it); a write on a standby is refused (the primary only takes claims, renewals and
        fences)."""
        lock = "pg_advisory_xact_lock(hashtextextended(%(lock)s, 0)), " if pool_lock else ""
        cursor = await conn.execute(
            f"SELECT {lock}poolsup.now() AS now, pg_is_in_recovery() AS standby",
            {"lock": f"poolsup:{self._name}"})
        row = await cursor.fetchone()
        assert row is not None
        if writes:
            self._refuse_standby(row)
        return float(row["now"])

    def _refuse_standby(self, row: DictRow | None) -> None:
        if row is not None and row["standby"]:
            raise StoreUnavailable(f"{self._where}: {STANDBY}")

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"{self._where}: {describe(exc)}")

    async def close(self) -> None:
        self._closed = True
        await self._pool.close()


def describe(exc: BaseException) -> str:
    """A driver error in one line."""
    diag = getattr(exc, "diag", None)
    text = getattr(diag, "message_primary", None) or str(exc) or type(exc).__name__
    return " ".join(text.split())
