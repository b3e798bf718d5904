"""Fixtures for every test layer: the anyio backend, a real Redis, a real PostgreSQL,
unique pool names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.helpers.postgres_server import PostgresServer
from tests.helpers.redis_cluster import RedisClusterNodes
from tests.helpers.redis_server import RedisServer


@pytest.fixture
def anyio_backend() -> str:
    # redis.asyncio runs on asyncio only; tests that need trio's MockClock override this.
    return "asyncio"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """A three-node Redis Cluster, started once for the session when a test asks."""
    cluster = RedisClusterNodes().start()
    yield cluster
    cluster.remove()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server per test process (xdist worker); each test uses its own pool
    name in its database, as pools share a database."""
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of this test's own, to pause, stop or restart."""
    server = RedisServer().start()
    yield server
    server.remove()


@pytest.fixture
def pool_name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"
