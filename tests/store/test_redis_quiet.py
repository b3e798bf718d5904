"""Redis: a lease that ran out while no supervisor could write (the store was frozen,
restarting or refusing writes) is recovered without counting a loss; one that ran out
while supervisors kept writing counts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.policy import QUIET_GAP
from tests.store.support import SHORT_TTL, claim, claim_one, new_job

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_url: str, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_url, pool_name) as store:
        yield store


async def test_a_lease_that_ran_out_in_a_quiet_store_is_not_counted(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await anyio.sleep(QUIET_GAP + 0.5)  # nobody writes: as if Redis were frozen

    batch = await claim(store, 1, max_lease_losses=1)

    assert batch.recovered == 1
    (job,) = batch.jobs
    assert (job.key, job.attempt) == ("k1", 1)
    assert (await store.job("k1")).lease_losses == 0


async def test_a_lease_that_ran_out_while_supervisors_wrote_is_counted(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    for _ in range(8):  # another supervisor's claims keep coming, as they do
        await anyio.sleep(0.2)
        await claim(store, 0, owner="other", max_lease_losses=1)

    record = await store.job("k1")
    assert (record.state, record.lease_losses) == ("failed", 1)
