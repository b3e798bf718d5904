"""The conformance suite's fixtures: every test runs once per store kind."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervisor.store import Store, opened_store

STORE_KINDS = ["redis", "cluster", "sqlite", "postgres"]

Connect = Callable[..., Awaitable[Store]]


@dataclass(frozen=True)
class StoreTarget:
    kind: str
    url: str
    pool: str


@pytest.fixture(params=STORE_KINDS)
def store_target(request: pytest.FixtureRequest, tmp_path: Path, pool_name: str) -> StoreTarget:
    if request.param == "redis":
        return StoreTarget("redis", request.getfixturevalue("redis_url"), pool_name)
    if request.param == "cluster":
        return StoreTarget("cluster", request.getfixturevalue("redis_cluster").url, pool_name)
    if request.param == "postgres":
        # Imported here so that a store module that cannot be imported is an error of
        # every test of that store, never a skip that passes.
        importlib.import_module("supervisor.store.postgres.store")
        return StoreTarget("postgres", request.getfixturevalue("postgres_url"), pool_name)
    # Imported here so that a store module that cannot be imported is an error of every
    # test of that store, never a skip that passes.
    importlib.import_module("supervisor.store.sqlite.store")
    return StoreTarget("sqlite", f"sqlite:///{tmp_path}/pool.db", pool_name)


@pytest.fixture
async def connect(store_target: StoreTarget) -> AsyncIterator[Connect]:
    """Open another connection to the test's pool; `retention=` as `open_store` takes it.
    Every store opened is closed at the end of the test."""
    async with AsyncExitStack() as stack:

        async def connect(*, retention: float = 86400.0) -> Store:
            return await stack.enter_async_context(
                opened_store(store_target.url, store_target.pool, retention=retention)
            )

        yield connect


@pytest.fixture
async def store(connect: Connect) -> Store:
    return await connect()
