"""The claimer against a real Redis that loses the reply to one claim after the claim went
through: its next claim, under the same id, starts the jobs the lost one handed out
(none orphaned to run out its lease), fenced from the first sending."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox.protocol import fence_clock
from supervisor.config import HandlerConfig
from supervisor.core.outcome import Complete
from supervisor.doorbell import Doorbell
from supervisor.errors import StoreUnavailable
from supervisor.job.claimer import Claimer
from supervisor.job.results import PendingResults
from supervisor.job.running import Registry, RunningJob
from supervisor.job.settle import Settler
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import ClaimBatch, ClaimedJob, DispatchRequest

pytestmark = pytest.mark.anyio


async def dispatch_jobs(store: Store, *keys: str) -> None:
    for key in keys:
        await store.dispatch(DispatchRequest(key=key, handler="h", payload=b"{}",
                                             max_attempts=3))


class WrappedStore:
    """A real store, with some of its calls changed by a subclass."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class LosesOneClaimReply(WrappedStore):
    """A store whose first claim that hands out a job is carried out, and then its
    reply lost."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.lost: ClaimBatch | None = None
        self.sent_at: list[float] = []

    async def claim(self, *args: Any, **kwargs: Any) -> ClaimBatch:
        self.sent_at.append(fence_clock())
        batch = await self._store.claim(*args, **kwargs)
        if batch.jobs and self.lost is None:
            self.lost = batch
            raise StoreUnavailable("reply lost")
        return batch



async def test_the_jobs_of_a_claim_whose_reply_was_lost_are_started(
    redis_store: Store,
) -> None:
    store = redis_store
    await dispatch_jobs(store, "k1")
    lossy = LosesOneClaimReply(store)
    started: list[tuple[ClaimedJob, float]] = []
    wakeup = Doorbell()

    async def ready() -> None:
        pass

    claimer = Claimer(store=lossy, registry=Registry(slot_freed=wakeup.ring),  # type: ignore[arg-type]
                      owner="sup-a", handlers=["h"], limits={}, capacity=2, lease_ttl=30.0,
                      start_job=lambda claimed, sent_at: started.append((claimed, sent_at)),
                      spawn_ready=ready, spawn_possible=lambda: True, wakeup=wakeup,
                      failures=StoreFailures("claim"), results=PendingResults(wakeup.ring))
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


class LosesTheReplyToAClaimCarryingResults(LosesOneClaimReply):
    async def claim(self, *args: Any, **kwargs: Any) -> ClaimBatch:
        self.sent_at.append(fence_clock())
        batch = await self._store.claim(*args, **kwargs)
        if kwargs.get("completing") and self.lost is None:
            self.lost = batch
            raise StoreUnavailable("reply lost")
        return batch


async def test_a_lost_reply_to_a_claim_carrying_a_result_loses_neither(
    redis_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The result is completed on its own (stored once), and a job the lost call
    handed out starts under its token."""
    store = redis_store
    await dispatch_jobs(store, "k1", "k2")
    lossy = LosesTheReplyToAClaimCarryingResults(store)
    started: list[ClaimedJob] = []
    wakeup = Doorbell()
    registry = Registry(slot_freed=wakeup.ring)
    results = PendingResults(wakeup.ring)
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)

    def start_job(claimed: ClaimedJob, sent_at: float) -> None:
        started.append(claimed)
        registry.add(RunningJob(claimed=claimed, handler=handler,
                                fork_server=None,  # type: ignore[arg-type]
                                fence_at=sent_at + 30))

    async def ready() -> None:
        pass

    claimer = Claimer(store=lossy, registry=registry,  # type: ignore[arg-type]
                      owner="sup-a", handlers=["h"], limits={}, capacity=1, lease_ttl=30.0,
                      start_job=start_job, spawn_ready=ready, spawn_possible=lambda: True,
                      wakeup=wakeup, failures=StoreFailures("claim"), results=results)
    settler = Settler(store, registry, StoreFailures("storing outcomes"), lease_ttl=30.0,
                      draining=anyio.Event(), with_claim=results.complete)
    async with anyio.create_task_group() as group:
        group.start_soon(claimer.run)
        with anyio.fail_after(10):
            while not started:  # noqa: ASYNC110 - the claimer's own pace
                await anyio.sleep(0.05)
            first = registry.get(started[0].key)
            assert first is not None
            with caplog.at_level(logging.INFO):
                stored = await settler.settle(first, Complete(b'"done"'))
            registry.remove(first)
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        claimer.stop()

    assert stored and lossy.lost is not None
    assert (await store.job(started[0].key)).result == "done"
    assert "lease lost" not in caplog.text
    # The result rode a claim or, with the next job's claim already on its way, a
    # settle: what the lost call handed out (if anything) started under its token.
    assert [job.key for job in started] == ["k1", "k2"]
    assert {(job.key, job.token) for job in lossy.lost.jobs} <= \
        {(job.key, job.token) for job in started[1:]}
    assert (await store.job(started[1].key)).state == "running"


class HoldsItsFirstClaim(WrappedStore):
    """A store whose first claim for a job waits until `answer` is set: a slow round
    trip."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.answer = anyio.Event()
        self.held = anyio.Event()
        self.counts: list[int] = []

    async def claim(self, *args: Any, **kwargs: Any) -> ClaimBatch:
        count = args[2]
        self.counts.append(count)
        if count and not self.held.is_set():
            self.held.set()
            await self.answer.wait()
        return await self._store.claim(*args, **kwargs)


async def test_a_slot_freed_while_a_claim_is_on_its_way_is_claimed_for_at_once(
    redis_store: Store,
) -> None:
    store = redis_store
    await dispatch_jobs(store, "k1", "k2")
    slow = HoldsItsFirstClaim(store)
    started: list[ClaimedJob] = []
    wakeup = Doorbell()
    registry = Registry(slot_freed=wakeup.ring)
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)

    def running(claimed: ClaimedJob) -> RunningJob:
        return RunningJob(claimed=claimed, handler=handler,
                          fork_server=None,  # type: ignore[arg-type]
                          fence_at=fence_clock() + 30)

    def start_job(claimed: ClaimedJob, sent_at: float) -> None:
        started.append(claimed)
        registry.add(running(claimed))

    busy = ClaimedJob(key="busy", handler="h", payload=b"{}", token=1, attempt=1,
                      max_attempts=3, lease_deadline=0.0, owner="sup-a")
    registry.add(running(busy))

    async def ready() -> None:
        pass

    claimer = Claimer(store=slow, registry=registry,  # type: ignore[arg-type]
                      owner="sup-a", handlers=["h"], limits={}, capacity=2, lease_ttl=30.0,
                      start_job=start_job, spawn_ready=ready, spawn_possible=lambda: True,
                      wakeup=wakeup, failures=StoreFailures("claim"),
                      results=PendingResults(wakeup.ring))
    async with anyio.create_task_group() as group:
        group.start_soon(claimer.run)
        with anyio.fail_after(10):
            await slow.held.wait()  # the claim for the one free slot is on its way
            first_busy = registry.get("busy")
            assert first_busy is not None
            registry.remove(first_busy)
            while not started:  # noqa: ASYNC110 - the claimer's own pace
                await anyio.sleep(0.02)
            slow.answer.set()
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        claimer.stop()

    assert slow.counts[:2] == [1, 1]
    assert sorted(job.key for job in started) == ["k1", "k2"]
