"""What only the Redis store has for schedules: the job index per schedule and how it
is kept small, and reads that work while Redis refuses writes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from supervisor.errors import StoreError
from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest, TickRequest
from supervisor.store.redis.keys import PoolKeys
from tests.helpers.redis_server import RedisServer
from tests.store.support import HANDLER, claim

pytestmark = pytest.mark.anyio

TICK = 1_700_000_000.0


def scheduled(key: str, schedule: str = "feeds") -> DispatchRequest:
    return DispatchRequest(key=key, handler=HANDLER, payload=b"{}", max_attempts=1,
                           schedule=schedule)


def tick(n: int, *, key: str | None = None) -> TickRequest:
    return TickRequest(schedule="feeds", tick=TICK + n, not_before=TICK + n,
                       fingerprint="fp", owner="sup-a",
                       dispatch=None if key is None else scheduled(key))


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def store(redis_url: str, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_url, pool_name) as store:
        yield store


async def _finish_all(store: Store) -> None:
    for job in (await claim(store, 1000)).jobs:
        await store.complete(job.lease, b"1")


async def test_a_fired_tick_drops_finished_jobs_from_the_schedule_index(
    store: Store, raw: Redis, pool_name: str
) -> None:
    index = PoolKeys(pool_name).schedule_jobs("feeds")
    await store.dispatch_many([scheduled(f"k{i}") for i in range(20)])
    await store.dispatch(scheduled("other", "elsewhere"))
    await _finish_all(store)
    await store.dispatch(scheduled("live"))
    assert await raw.zcard(index) == 21

    await store.fire_tick(tick(1))

    assert [key.decode() for key in await raw.zrange(index, 0, -1)] == ["live"]


async def test_the_index_of_a_schedule_with_a_job_per_tick_stays_small(
    store: Store, raw: Redis, pool_name: str
) -> None:
    index = PoolKeys(pool_name).schedule_jobs("feeds")
    for n in range(30):
        assert (await store.fire_tick(tick(n, key=f"run-{n}"))).outcome == "dispatched"
        await _finish_all(store)

    assert await raw.zcard(index) <= 1


async def test_live_keys_of_schedule_drops_every_stale_entry(
    store: Store, raw: Redis, pool_name: str
) -> None:
    index = PoolKeys(pool_name).schedule_jobs("feeds")
    await store.dispatch_many([scheduled(f"k{i}") for i in range(5)])
    await _finish_all(store)
    await store.dispatch(scheduled("k1"))
    await store.dispatch(DispatchRequest(key="k2", handler=HANDLER, payload=b"{}",
                                         max_attempts=1))  # by hand: not the schedule's

    assert await store.live_keys_of_schedule("feeds") == ["k1"]
    assert [key.decode() for key in await raw.zrange(index, 0, -1)] == ["k1"]


async def test_schedules_and_live_keys_read_while_redis_is_out_of_memory(
    own_redis: RedisServer, pool_name: str
) -> None:
    own_raw = Redis.from_url(own_redis.url)
    try:
        async with opened_store(own_redis.url, pool_name) as store:
            await store.fire_tick(tick(1, key="a"))
            healthy = await store.schedules()
            await own_raw.script_flush()  # the scripts are loaded again under OOM
            await own_raw.config_set("maxmemory-policy", "noeviction")
            await own_raw.config_set("maxmemory", 1)
            try:
                book = await store.schedules()
                live = await store.live_keys_of_schedule("feeds")
                with pytest.raises(StoreError, match="maxmemory"):
                    await store.fire_tick(tick(2, key="b"))
                with pytest.raises(StoreError, match="maxmemory"):
                    await store.dispatch_many([scheduled("c")])
            finally:
                await own_raw.config_set("maxmemory", 0)

            assert book.schedules == healthy.schedules
            assert live == ["a"]
            (record,) = (await store.schedules()).schedules
            assert (record.last_tick, record.fires) == (TICK + 1, 1)
            assert [r.key for r in await store.jobs()] == ["a"]
    finally:
        await own_raw.aclose()
