"""The PostgreSQL store makes its own schema `poolsup`, once, whatever number of
supervisors start together on a fresh database; it refuses a schema written by a newer
poolsup; several pools share the database.  (Version 1 is the first shipped: the next
version adds its migration test from it here.)"""

from __future__ import annotations

import uuid

import anyio
import psycopg
import pytest

from supervisor.errors import ConfigError
from supervisor.store import opened_store
from supervisor.store.postgres.schema import SCHEMA_VERSION
from tests.helpers.postgres_server import PostgresServer
from tests.store.support import new_job

pytestmark = pytest.mark.anyio


def fresh_database(server: PostgresServer) -> str:
    name = f"db_{uuid.uuid4().hex[:8]}"
    server.psql(f"CREATE DATABASE {name}")
    return server.url_as("postgres", database=name)


async def test_supervisors_starting_together_make_the_schema_once(
    postgres_server: PostgresServer,
) -> None:
    url = fresh_database(postgres_server)

    async def start(index: int) -> None:
        async with opened_store(url, f"pool-{index % 2}") as store:
            await store.dispatch(new_job(f"k{index}"))

    async with anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(start, index)

    with psycopg.connect(url) as conn:
        versions = conn.execute("SELECT version FROM poolsup.schema_version").fetchall()
        per_pool = conn.execute("SELECT pool, count(*) FROM poolsup.jobs GROUP BY pool "
                                "ORDER BY pool").fetchall()
    assert versions == [(SCHEMA_VERSION,)]
    assert per_pool == [("pool-0", 3), ("pool-1", 3)]


async def test_a_schema_of_a_newer_poolsup_is_refused_in_one_line(
    postgres_server: PostgresServer,
) -> None:
    url = fresh_database(postgres_server)
    async with opened_store(url, "p") as store:
        await store.ping()
        await store.pause(["h"])
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE poolsup.schema_version SET version = %s", [SCHEMA_VERSION + 1])

    async with opened_store(url, "p") as store:
        with pytest.raises(ConfigError) as caught:
            await store.pause(["h"])
    assert "newer poolsup" in caught.value.message and "\n" not in caught.value.message
