"""Finished records are kept for the retention period, then dropped."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import JobNotFound
from tests.store.conftest import Connect
from tests.store.support import claim_one, new_job

pytestmark = pytest.mark.anyio

RETENTION = 1.0


async def test_finished_records_are_dropped_after_the_retention_period(connect: Connect) -> None:
    store = await connect(retention=RETENTION)
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b"1")
    assert [r.key for r in await store.jobs("succeeded")] == ["k1"]

    await anyio.sleep(RETENTION + 0.5)

    with pytest.raises(JobNotFound):
        await store.job("k1")
    assert await store.jobs() == []
    assert (await store.snapshot()).counts["succeeded"] == 0
    await store.dispatch(new_job("k1"))
    assert (await store.job("k1")).state == "pending"


async def test_live_records_are_kept_past_the_retention_period(connect: Connect) -> None:
    store = await connect(retention=RETENTION)
    await store.dispatch(new_job("k1"))

    await anyio.sleep(RETENTION + 0.5)

    assert (await store.job("k1")).state == "pending"
