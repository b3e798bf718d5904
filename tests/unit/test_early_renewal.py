"""A job's start asks for a renewal EARLY_RENEWAL_DELAY later, so that the store soon shows
its pid; a job over by then needs none, and a busy supervisor of short jobs does not
renew every EARLY_RENEWAL_DELAY for them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from supervisor.config import HandlerConfig
from supervisor.job.lease_keeper import EARLY_RENEWAL_DELAY, LeaseKeeper
from supervisor.job.running import Registry, RunningJob
from supervisor.store.records import ClaimedJob, JobStats, Lease, RenewResult

pytestmark = pytest.mark.anyio


class FencesNothing:
    async def fence(self, job_ids: list[str], deadline: float) -> None:
        pass


class CountingStore:
    def __init__(self) -> None:
        self.pids: list[list[int | None]] = []

    async def renew(self, owner: str, instance: str, leases: Sequence[Lease],
                    lease_ttl: float, stats: dict[str, JobStats]) -> RenewResult:
        self.pids.append([job.pid for job in stats.values()])
        return RenewResult(lost=frozenset(), stop_requested=frozenset(),
                           notified=frozenset(), store_time=0.0)


def started_job(registry: Registry, token: int) -> RunningJob:
    claimed = ClaimedJob(key=f"k{token}", handler="h", payload=b"null", token=token,
                         attempt=1, max_attempts=3, lease_deadline=0.0, owner="sup-a")
    handler = HandlerConfig(name="h", path=Path("/h.py"), rebalance=False)
    job = RunningJob(claimed=claimed, handler=handler, fork_server=FencesNothing(),  # type: ignore[arg-type]
                     fence_at=0.0)
    registry.add(job)
    child: Any = SimpleNamespace(pid=os.getpid())
    job.attach(child)
    return job


async def keeper_running(store: CountingStore, registry: Registry,
                         group: anyio.abc.TaskGroup) -> LeaseKeeper:
    keeper = LeaseKeeper(store=store, registry=registry,  # type: ignore[arg-type]
                         owner="sup-a", instance="i-1", lease_ttl=600.0,
                         on_membership=lambda state: None)
    group.start_soon(keeper.run)
    await anyio.lowlevel.checkpoint()
    return keeper


async def test_a_job_still_running_after_the_delay_is_shown_by_an_early_renewal() -> None:
    store, registry = CountingStore(), Registry(slot_freed=lambda: None)
    async with anyio.create_task_group() as group:
        keeper = await keeper_running(store, registry, group)
        started_job(registry, 1)
        keeper.renew_soon()
        with anyio.fail_after(5):
            while not store.pids:  # noqa: ASYNC110 - the keeper's own pace
                await anyio.sleep(EARLY_RENEWAL_DELAY / 5)
        group.cancel_scope.cancel()
    assert store.pids == [[os.getpid()]]


async def test_jobs_over_within_the_delay_cause_no_renewal() -> None:
    store, registry = CountingStore(), Registry(slot_freed=lambda: None)
    async with anyio.create_task_group() as group:
        keeper = await keeper_running(store, registry, group)
        for token in range(1, 21):  # short jobs, one after the other
            job = started_job(registry, token)
            keeper.renew_soon()
            await anyio.sleep(EARLY_RENEWAL_DELAY / 5)
            registry.remove(job)
        await anyio.sleep(3 * EARLY_RENEWAL_DELAY)
        group.cancel_scope.cancel()
    assert store.pids == []


async def test_a_pid_reported_after_the_delay_is_shown_when_it_comes() -> None:
    """A fresh child's job runs before the fork server's report of its pid is read; on a
    busy host the report can come after the early renewal's look. The keeper looks
    again until the pid is known, and renews then, not at the next regular renewal."""
    store, registry = CountingStore(), Registry(slot_freed=lambda: None)
    async with anyio.create_task_group() as group:
        keeper = await keeper_running(store, registry, group)
        job = started_job(registry, 1)
        assert job.child is not None
        job.child.pid = None  # not reported yet
        keeper.renew_soon()
        await anyio.sleep(3 * EARLY_RENEWAL_DELAY)
        job.child.pid = os.getpid()  # the report comes
        with anyio.fail_after(5):  # the regular renewal is minutes away
            while not any(pid is not None for pids in store.pids for pid in pids):  # noqa: ASYNC110
                await anyio.sleep(EARLY_RENEWAL_DELAY / 5)
        group.cancel_scope.cancel()
    assert store.pids == [[os.getpid()]]  # no renewal for a pid not known yet
