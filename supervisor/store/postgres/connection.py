"""The PostgreSQL store's URL and connections: `postgresql://` and `postgres://` URLs
are libpq's own (every connection option in the query is libpq's: sslmode, sslrootcert,
options, target_session_attrs, ...), handed to psycopg as they are.  poolsup adds only
defaults the URL does not set: `connect_timeout` and `application_name`.  The password
is never shown: errors name the server by its redacted URL."""

from __future__ import annotations

import contextlib
import select
from collections import deque
from collections.abc import AsyncIterator

import anyio
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row

from supervisor.errors import ConfigError
from supervisor.redaction import redact_in, redact_url
from supervisor.store.turns import Turns

SCHEMES = ("postgresql", "postgres")
LOCK_WAIT = 1.0  # seconds a statement waits for a lock (lock_timeout) before it fails
CONNECT_TIMEOUT = 5  # seconds (libpq's connect_timeout), unless the URL says otherwise
POOL_SIZE = 4  # connections a store object may hold at once
DEFAULTS = {"connect_timeout": str(CONNECT_TIMEOUT), "application_name": "poolsup"}


def where(url: str) -> str:
    """The server as one line names it."""
    return f"postgresql at {redact_url(url)}"


def conninfo(url: str) -> str:
    """The URL as libpq reads it, with poolsup's defaults for what it leaves out; a URL
    libpq refuses is a `ConfigError`."""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        first = redact_in(" ".join(str(exc).split()), url)
        raise ConfigError(f"store URL {redact_url(url)!r}: {first}") from None
    missing = {name: value for name, value in DEFAULTS.items() if name not in given}
    return make_conninfo(url, **missing)


def refused_option(exc: psycopg.Error, url: str) -> ConfigError | None:
    """A connection option's value that libpq (or psycopg) refuses before it reaches
    any server (`sslmode=bogus`, `port=x`, ...), as a `ConfigError`; None for any other
    error."""
    text = " ".join(str(exc).split())
    if text.startswith("connection is bad: invalid ") or text.startswith("bad value for "):
        message = redact_in(text.removeprefix("connection is bad: "), url)
        return ConfigError(f"store URL {redact_url(url)!r}: {message}")
    return None


def _readable(fd: int) -> bool:
    poller = select.poll()  # not select.select: a supervisor's descriptors pass 1024
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class Connections:
    """The store's connections: up to POOL_SIZE at once, idle ones kept for the next
    call, a new one made at once when none is idle.  No background reconnection with a
    backoff of its own (psycopg_pool's grew to seconds after an outage, so that calls
    failed with "no connection" for a while after the server was back, and a chaos run's
    drain failed for it): each call that needs a connection makes it, and the store's
    callers pace their retries.  A connection comes back to the idle ones only when it is
    open, outside a transaction, and out of autocommit (a single statement cut short
    could not switch it back)."""

    def __init__(self, conninfo: str, url: str) -> None:
        self._conninfo = conninfo
        self._url = url
        self._idle: deque[psycopg.AsyncConnection[DictRow]] = deque()
        self._turns = Turns(POOL_SIZE)
        self._closed = False

    def turn(self, *, first: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """One of the POOL_SIZE calls at once (`first`: ahead of those waiting, a
        renewal); `connection` inside it."""
        return self._turns.turn(first=first)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[DictRow]]:
        """A connection for a call that holds its turn."""
        conn = await self._idle_open() or await self._connect()
        try:
            yield conn
        finally:
            if (self._closed or conn.closed or conn.autocommit
                    or conn.info.transaction_status != TransactionStatus.IDLE):
                with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                    await conn.close()
            else:
                self._idle.append(conn)

    async def _idle_open(self) -> psycopg.AsyncConnection[DictRow] | None:
        """An idle connection the server did not close meanwhile.  An idle connection has
        nothing to read unless the server ended it (a restart's FATAL, or the end of the
        stream): such a one is closed here, before any statement goes on it, so that no
        statement has to be tried again on another."""
        while self._idle:
            conn = self._idle.pop()
            if not _readable(conn.fileno()):
                return conn
            with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                await conn.close()
        return None

    async def _connect(self) -> psycopg.AsyncConnection[DictRow]:
        try:
            conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True,
                                                         row_factory=dict_row)
        except psycopg.Error as exc:
            if (refused := refused_option(exc, self._url)) is not None:
                raise refused from None
            raise
        try:
            # The store's statements are prepared (psycopg prepares one after its fifth
            # use); left to choose, the server planned some anew at every call (a claim's
            # due_keys: a quarter of a millisecond each time).  A lock waited for
            # LOCK_WAIT is a holder frozen inside a transaction (db.py).
            await conn.execute("SET plan_cache_mode = force_generic_plan; "
                               f"SET lock_timeout = {round(LOCK_WAIT * 1000)}")
            await conn.set_autocommit(False)
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(psycopg.Error):
                await conn.close()
            raise
        return conn

    async def close(self) -> None:
        self._closed = True
        while self._idle:
            with contextlib.suppress(psycopg.Error):
                await self._idle.pop().close()
