"""Redis: with every connection of the store's pool in use, a lease renewal takes the next
one released, ahead of the calls already waiting (1,000 jobs' output at their ends once
kept a renewal waiting past its lease)."""

from __future__ import annotations

import anyio
import pytest

from supervisor.store.redis.connection import RENEWAL_FIRST, WaitingConnectionPool
from tests.helpers.redis_server import RedisServer

pytestmark = pytest.mark.anyio


async def test_a_renewal_waits_for_a_connection_ahead_of_the_others(
    redis_server: RedisServer,
) -> None:
    pool = WaitingConnectionPool.from_url(redis_server.url, max_connections=1)
    held = await pool.get_connection()
    order: list[str] = []

    async def wait(name: str, renewal: bool) -> None:
        RENEWAL_FIRST.set(renewal)
        connection = await pool.get_connection()
        order.append(name)
        await pool.release(connection)

    async with anyio.create_task_group() as group:
        group.start_soon(wait, "output", False)
        await anyio.sleep(0.05)
        group.start_soon(wait, "renewal", True)
        await anyio.sleep(0.05)
        await pool.release(held)

    assert order == ["renewal", "output"]
    await pool.disconnect()
