"""The PostgreSQL store's URL and connections: `postgresql://` and `postgres://` URLs
are libpq's own (every connection option in the query is libpq's: sslmode, sslrootcert,
options, target_session_attrs, ...), handed to psycopg as they are.  poolsup adds only
defaults the URL does not set: `connect_timeout` and `application_name`.  The password
is never shown: errors name the server by its redacted URL."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool

from supervisor.errors import ConfigError
from supervisor.redaction import redact_in, redact_url

SCHEMES = ("postgresql", "postgres")
# The pool logs each failed attempt to connect; the store says it once, as a store failure.
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
CONNECT_TIMEOUT = 5  # seconds (libpq's connect_timeout), unless the URL says otherwise
POOL_SIZE = 4  # connections a store object may hold at once
POOL_WAIT = 2.0  # seconds a call waits for a connection before the store counts as failing
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


async def why_not(conninfo: str) -> str:
    """Why a connection cannot be made now, in one line (the pool only says that it
    got none in time): refused, a wrong password, an unknown database, ..."""
    try:
        conn = await psycopg.AsyncConnection.connect(conninfo)
    except psycopg.Error as exc:
        return " ".join(str(exc).split()) or type(exc).__name__
    await conn.close()
    return f"no connection free within {POOL_WAIT:g} s"


def connection_pool(url: str) -> AsyncConnectionPool[psycopg.AsyncConnection[DictRow]]:
    """A pool that connects in the background: a store that cannot be reached now is
    opened all the same, and its calls fail (StoreUnavailable) until it answers."""
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo(url), min_size=1, max_size=POOL_SIZE, open=False,
        kwargs={"row_factory": dict_row, "autocommit": False},
        timeout=POOL_WAIT, reconnect_timeout=float(365 * 86400),
        name=f"poolsup-{time.monotonic_ns()}")
    return pool
