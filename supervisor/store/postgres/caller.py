"""Dispatch inside the caller's own transaction (`dispatch(..., connection=conn)`): the
jobs are written by poolsup.dispatch_jobs (sql/schema.sql), one statement run on the
caller's connection, in its current transaction.  They exist, and NOTIFY (transactional)
wakes a supervisor, only when that transaction commits; a rollback leaves nothing.  The
statement takes no pool-wide lock, so a caller's transaction left open holds up no
supervisor: claims skip the rows it holds.

A connection is a psycopg 3 `Connection` (the blocking client) or `AsyncConnection`
(AsyncClient), or a Django database connection whose driver is psycopg 3 (its
underlying connection, after `ensure_connection()`).  It must be on the pool's
database; the store checked, or made, the schema `poolsup` there first (`PgCaller`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.rows import dict_row

from supervisor.errors import DispatchRefused, UsageError
from supervisor.store.postgres import history
from supervisor.store.postgres.dispatch import dispatch_params
from supervisor.store.postgres.schema import load_queries
from supervisor.store.records import DispatchRequest, JobRecord
from supervisor.store.sql.context import SqlPart
from supervisor.store.sql.dispatch import refusals
from supervisor.store.sql.records import job_record
from supervisor.store.sql.tx import Tx

QUERIES = load_queries()
DISPATCH, RECORD = QUERIES["caller_dispatch"], QUERIES["caller_record"]


def sync_connection(connection: Any) -> psycopg.Connection[Any]:
    """The psycopg 3 connection behind `connection` (itself, or a Django connection's)."""
    if isinstance(connection, psycopg.Connection):
        return connection
    if isinstance(connection, psycopg.AsyncConnection):
        raise UsageError("connection=: an AsyncConnection goes with AsyncClient; Client "
                         "takes a psycopg Connection or a Django connection")
    if callable(getattr(connection, "ensure_connection", None)):  # Django's
        vendor = getattr(connection, "vendor", "?")
        if vendor != "postgresql":
            raise UsageError(f"connection=: a Django connection to {vendor}, not to the "
                             "pool's PostgreSQL database")
        connection.ensure_connection()
        raw = connection.connection
        if isinstance(raw, psycopg.Connection):
            return raw
        raise UsageError("connection=: this Django connection's driver is not psycopg 3 "
                         f"({type(raw).__module__}); install psycopg>=3.1")
    raise UsageError(f"connection=: takes a psycopg 3 connection or a Django connection "
                     f"(got {type(connection).__name__})")


def async_connection(connection: Any) -> psycopg.AsyncConnection[Any]:
    if isinstance(connection, psycopg.AsyncConnection):
        return connection
    raise UsageError(f"connection=: AsyncClient takes a psycopg AsyncConnection (got "
                     f"{type(connection).__name__})")


@contextlib.contextmanager
def on_the_pools_database(
        conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> Iterator[None]:
    """A connection to a database without poolsup's schema is on another database than
    the pool's: the caller's mistake (`UsageError`, one line), not the driver's
    multi-line "schema does not exist".  Its transaction is failed, as for any error."""
    try:
        yield
    except (psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedFunction,
            psycopg.errors.UndefinedTable):
        raise UsageError(f"connection=: the database {conn.info.dbname!r} has no poolsup "
                         "schema; the connection must be on the pool's database") from None


def _refusals(requests: Sequence[DispatchRequest], row: Any, pools: tuple[str, str],
              conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
              ) -> list[DispatchRefused | None]:
    codes, max_pending = row["codes"], row["max_pending"]
    if codes is None:
        here = f"{conn.info.host}:{conn.info.port}"
        same_server = row["sysid"] == pools[1]
        raise UsageError(f"connection=: it is on the database {row['dbname']!r} of "
                         f"{here}{'' if same_server else ' (another cluster)'}, not on the "
                         f"pool's database {pools[0]!r}; nothing was written")
    return refusals(requests, codes, max_pending)


class PgCaller(SqlPart):
    """The store's side of `connection=`."""

    _database: tuple[str, str] | None = None  # the pool's: (name, system identifier)

    async def ready(self) -> None:
        """The schema is there (made or migrated by the store's first transaction), and
        which database is the pool's is known."""
        async def work(tx: Tx) -> tuple[str, str]:
            row = await tx.row("database_identity")
            assert row is not None
            return row["dbname"], row["sysid"]

        if self._database is None:
            self._database = await self._ctx.db.write(work, pool_lock=False)

    def _params(self, requests: Sequence[DispatchRequest]) -> dict[str, Any]:
        assert self._database is not None, "ready() comes first"
        dbname, sysid = self._database
        return {**dispatch_params(self._ctx.pool, self._ctx.retention, requests),
                "dbname": dbname, "sysid": sysid}

    def dispatch_on(self, connection: Any, requests: Sequence[DispatchRequest],
                    ) -> list[DispatchRefused | None]:
        """`dispatch_each` in the transaction of a blocking connection (after `ready`)."""
        conn = sync_connection(connection)
        params = self._params(requests)
        with on_the_pools_database(conn), conn.cursor(row_factory=dict_row) as cursor:
            row = cursor.execute(DISPATCH, params).fetchone()
        assert self._database is not None
        return _refusals(requests, row, self._database, conn)

    def record_on(self, connection: Any, key: str) -> JobRecord:
        """The job's record as the caller's transaction sees it."""
        conn = sync_connection(connection)
        where = {"pool": self._ctx.pool, "key": key}
        with conn.cursor(row_factory=dict_row) as cursor:
            row = cursor.execute(RECORD, where).fetchone()
        return job_record(row, history.of_row(row))

    async def dispatch_on_async(self, connection: Any, requests: Sequence[DispatchRequest],
                                ) -> list[DispatchRefused | None]:
        """`dispatch_each` in the transaction of an AsyncConnection (after `ready`)."""
        conn = async_connection(connection)
        params = self._params(requests)
        with on_the_pools_database(conn):
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(DISPATCH, params)
                row = await cursor.fetchone()
        assert self._database is not None
        return _refusals(requests, row, self._database, conn)

    async def record_on_async(self, connection: Any, key: str) -> JobRecord:
        conn = async_connection(connection)
        where = {"pool": self._ctx.pool, "key": key}
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(RECORD, where)
            row = await cursor.fetchone()
        return job_record(row, history.of_row(row))
