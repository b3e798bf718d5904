"""A result waiting for a claim to carry it (`job/results.py`)."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import StoreFailure
from supervisor.job.results import PendingResults, answer
from supervisor.store.records import Lease

pytestmark = pytest.mark.anyio

LEASE = Lease(key="k", token=7, owner="sup")


async def test_a_result_no_claim_carries_within_its_wait_fails_and_stays_for_the_next_claim(
) -> None:
    results = PendingResults(wake_claimer=lambda: None)
    with anyio.fail_after(5), pytest.raises(StoreFailure, match=r"within 0\.05 s"):
        await results.complete(LEASE, b'"done"', wait=0.05)
    # The settle then completes it on its own; a claim may still carry it (stored once).
    assert [pending.completion.lease for pending in results.take()] == [LEASE]


async def test_a_result_a_claim_carries_in_time_is_stored() -> None:
    results = PendingResults(wake_claimer=lambda: None)
    async with anyio.create_task_group() as group:
        async def claim() -> None:
            await anyio.sleep(0.01)
            answer(results.take(), stored=[True])
        group.start_soon(claim)
        with anyio.fail_after(5):
            await results.complete(LEASE, b'"done"', wait=1.0)
