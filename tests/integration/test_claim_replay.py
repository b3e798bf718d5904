"""The claimer against a real Redis that loses the reply to one claim after the claim went
through: its next claim, under the same id, starts the jobs the lost one handed out
(none orphaned to run out its lease), fenced from the first sending."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from sandbox.protocol import fence_clock
from supervisor.doorbell import Doorbell
from supervisor.errors import StoreUnavailable
from supervisor.job.claimer import Claimer
from supervisor.job.running import Registry
from supervisor.service.store_failures import StoreFailures
from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import ClaimBatch, ClaimedJob, DispatchRequest
from tests.helpers.redis_server import RedisServer

pytestmark = pytest.mark.anyio


class LosesOneClaimReply:
    """A store whose first claim that hands out a job is carried out, and then its
    reply lost."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.lost: ClaimBatch | None = None
        self.sent_at: list[float] = []

    async def claim(self, *args: Any, **kwargs: Any) -> ClaimBatch:
        self.sent_at.append(fence_clock())
        batch = await self._store.claim(*args, **kwargs)
        if batch.jobs and self.lost is None:
            self.lost = batch
            raise StoreUnavailable("reply lost")
        return batch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
async def store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_server.url, pool_name) as store:
        yield store


async def test_the_jobs_of_a_claim_whose_reply_was_lost_are_started(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="k1", handler="h", payload=b"{}", max_attempts=3))
    lossy = LosesOneClaimReply(store)
    started: list[tuple[ClaimedJob, float]] = []
    wakeup = Doorbell()

    async def ready() -> None:
        pass

    claimer = Claimer(store=lossy, registry=Registry(slot_freed=wakeup.ring),  # type: ignore[arg-type]
                      owner="sup-a", handlers=["h"], capacity=2, lease_ttl=30.0,
                      start_job=lambda claimed, sent_at: started.append((claimed, sent_at)),
                      spawn_ready=ready, spawn_possible=lambda: True, wakeup=wakeup,
                      failures=StoreFailures("claim"))
    async with anyio.create_task_group() as group:
        group.start_soon(claimer.run)
        with anyio.fail_after(10):
            while not started:  # noqa: ASYNC110 - the claimer's own pace
                await anyio.sleep(0.05)
        claimer.stop()

    assert lossy.lost is not None
    ((claimed, fenced_from),) = started
    assert (claimed.key, claimed.token) == ("k1", lossy.lost.jobs[0].token)
    # Fenced from the lost claim's sending, not from the retry's.
    assert fenced_from <= lossy.sent_at[0] < lossy.sent_at[-1]
    record = await store.job("k1")
    assert (record.state, record.token, record.attempts) == ("running", claimed.token, 1)
