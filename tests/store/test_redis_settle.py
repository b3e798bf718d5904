"""Redis: a claim only completing (a settle, lua/claim-10+n.lua) does none of a claim's
fixed part: beside recovering no lease (tests/store/test_outcomes.py, every store), it
notes no claim of the pool and leaves the waiting sets as they were."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis

from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import Completion
from supervisor.store.redis.keys import PoolKeys
from tests.helpers.redis_server import RedisServer
from tests.store.support import HANDLER, OWNER, SHORT_TTL, claim_one, new_job, wait_for_expiry

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_server.url, pool_name) as store:
        yield store


async def test_a_settle_notes_no_claim_and_leaves_the_waiting_sets(
    store: Store, redis_server: RedisServer, pool_name: str,
) -> None:
    keys = PoolKeys(pool_name)
    client = redis.Redis.from_url(redis_server.url)
    for key in ("k1", "k2"):
        await store.dispatch(new_job(key))
    done = await claim_one(store)
    await claim_one(store, owner="sup-b", lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    before = await client.hgetall(keys.health)
    waiting_before = await client.smembers(keys.waiting(HANDLER))

    batch = await store.claim(OWNER, [HANDLER], 0, 30.0, 5, only_completing=True,
                              completing=[Completion(done.lease, b"1")])

    assert batch.completed == (True,)
    assert await client.hgetall(keys.health) == before
    assert await client.smembers(keys.waiting(HANDLER)) == waiting_before
    await client.aclose()
