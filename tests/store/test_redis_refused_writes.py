"""Redis: a lease that ran out while the store refused its supervisor's writes (out of
memory) is recovered without counting a loss; the supervisor's own next claim, sent
after the refusals, witnessed the failure (core/lease_losses.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
import redis

from supervisor.errors import StoreFailure
from supervisor.store import opened_store
from supervisor.store.base import Store
from tests.helpers.redis_server import RedisServer
from tests.store.support import SHORT_TTL, claim, claim_one, new_job

pytestmark = pytest.mark.anyio

REFUSING_FOR = 1.2  # longer than SHORT_TTL


@pytest.fixture
async def store(own_redis: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(own_redis.url, pool_name) as store:
        yield store


@pytest.fixture
def admin(own_redis: RedisServer) -> Iterator[redis.Redis]:
    with redis.Redis(port=own_redis.port) as admin:
        admin.config_set("maxmemory-policy", "noeviction")
        yield admin
        admin.config_set("maxmemory", 0)


async def test_a_lease_that_ran_out_while_redis_refused_writes_is_not_counted(
    store: Store, admin: redis.Redis
) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    admin.config_set("maxmemory", 1)
    with anyio.move_on_after(REFUSING_FOR):
        while True:  # the supervisor keeps claiming, as it does, and is refused
            with pytest.raises(StoreFailure, match=r"OOM|maxmemory"):
                await claim(store, 0, max_lease_losses=1)
            await anyio.sleep(0.1)
    admin.config_set("maxmemory", 0)

    batch = await claim(store, 1, max_lease_losses=1)

    assert batch.recovered == 1
    assert [(job.key, job.attempt) for job in batch.jobs] == [("k1", 1)]
    assert (await store.job("k1")).lease_losses == 0


async def test_refusals_before_the_last_claim_went_through_excuse_nothing_later(
    store: Store, admin: redis.Redis
) -> None:
    await store.dispatch(new_job("k1"))
    admin.config_set("maxmemory", 1)
    with pytest.raises(StoreFailure):
        await claim(store, 0)
    admin.config_set("maxmemory", 0)
    await claim(store, 0)  # the failure is told
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await anyio.sleep(SHORT_TTL + 0.3)  # its holder died

    await claim(store, 0, max_lease_losses=1)

    record = await store.job("k1")
    assert (record.state, record.lease_losses) == ("failed", 1)


async def test_a_lease_that_ran_out_while_supervisors_wrote_is_counted(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    for _ in range(8):  # another supervisor's claims keep coming, as they do
        await anyio.sleep(0.2)
        await claim(store, 0, owner="other", max_lease_losses=1)

    record = await store.job("k1")
    assert (record.state, record.lease_losses) == ("failed", 1)


async def test_a_newcomer_that_claims_first_after_the_refusals_leaves_the_lease_to_a_witness(
    store: Store, admin: redis.Redis, own_redis: RedisServer, pool_name: str
) -> None:
    """Found by `python -m tests.chaos --minutes 30 --seed 42 --overlap`: a supervisor
    started during an outage (or thawed after it) made the first claim after it, saw no
    failure, and counted the loss of a lease that the outage ended."""
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    admin.config_set("maxmemory", 1)
    with anyio.move_on_after(REFUSING_FOR):
        while True:
            with pytest.raises(StoreFailure, match=r"OOM|maxmemory"):
                await claim(store, 0, max_lease_losses=1)
            await anyio.sleep(0.1)
    admin.config_set("maxmemory", 0)

    async with opened_store(own_redis.url, pool_name) as newcomer:
        first = await claim(newcomer, 1, owner="newcomer", max_lease_losses=1)
    witnessed = await claim(store, 1, max_lease_losses=1)

    assert (first.recovered, first.jobs) == (0, ())
    assert witnessed.recovered == 1
    assert [(job.key, job.attempt) for job in witnessed.jobs] == [("k1", 1)]
    assert (await store.job("k1")).lease_losses == 0
