"""Stores: where jobs, leases and membership live.  `open_store` picks one by URL."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from supervisor.errors import ConfigError
from supervisor.redaction import redact_url
from supervisor.store.base import Store
from supervisor.store.redis.url import SCHEMES as REDIS_SCHEMES

POSTGRES_SCHEMES = ("postgresql", "postgres")

__all__ = ["Store", "check_url", "open_store", "opened_store"]

DEFAULT_RETENTION = 86400.0


async def open_store(url: str, pool: str, *, retention: float = DEFAULT_RETENTION,
                     wait_replicas: int = 0) -> Store:
    """The store `url` names (redis://, rediss://, unix://, redis+cluster://,
    rediss+cluster://, redis+sentinel://, rediss+sentinel://, sqlite:///path) for `pool`.
    `wait_replicas` (Redis only): see RedisStore.open.
    The caller closes it; `opened_store` does that for you."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in REDIS_SCHEMES:
        from supervisor.store.redis.store import RedisStore

        return await RedisStore.open(url, pool, retention=retention,
                                     wait_replicas=wait_replicas)
    if scheme == "sqlite":
        # Imported by name so that each store's driver loads only when it is used.
        sqlite_store = importlib.import_module("supervisor.store.sqlite.store")
        store: Store = await sqlite_store.SqliteStore.open(url, pool, retention=retention)
        return store
    if scheme in POSTGRES_SCHEMES:
        postgres_store = _postgres_module(url)
        pg: Store = await postgres_store.PgStore.open(url, pool, retention=retention)
        return pg
    raise ConfigError(
        f"store URL {redact_url(url)!r}: unknown scheme; use redis://, rediss://, unix://, "
        "redis+cluster://, rediss+cluster://, redis+sentinel://, rediss+sentinel://, "
        "postgresql://, postgres:// or sqlite:///path/to/file.db"
    )


def check_url(url: str) -> None:
    """What can be known of a PostgreSQL store URL without its server (`poolsup check`):
    the postgres extra is installed and libpq can read the URL; else a `ConfigError`,
    as opening the store would raise."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in POSTGRES_SCHEMES:
        _postgres_module(url)
        connection = importlib.import_module("supervisor.store.postgres.connection")
        connection.conninfo(url)


def _postgres_module(url: str) -> Any:
    """The PostgreSQL store's module; without its driver, one line naming the extra."""
    try:
        return importlib.import_module("supervisor.store.postgres.store")
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "psycopg":
            raise
        raise ConfigError(
            f"store URL {redact_url(url)!r}: the PostgreSQL store needs the postgres extra "
            f"(pip install 'poolsup[postgres]'; {exc.name} is missing)") from None


@asynccontextmanager
async def opened_store(
    url: str, pool: str, *, retention: float = DEFAULT_RETENTION, wait_replicas: int = 0
) -> AsyncIterator[Store]:
    """`open_store` as a context manager that closes the store."""
    store = await open_store(url, pool, retention=retention, wait_replicas=wait_replicas)
    try:
        yield store
    finally:
        await store.close()
