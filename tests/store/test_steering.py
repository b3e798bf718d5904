"""Steering the pool in the store: priorities, pool-wide limits and rates enforced at
claim time, pauses, unique windows and max_pending (every store)."""

from __future__ import annotations

import dataclasses

import anyio
import pytest

from supervisor.core.limits import Limits, Rate
from supervisor.errors import JobExists, PoolFull
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest, Paused
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def keys_claimed(store: Store, count: int, *, owner: str = OWNER,
                       limits: dict[str, Limits] | None = None,
                       lease_ttl: float = LONG_TTL) -> list[str]:
    batch = await store.claim(owner, (HANDLER,), count, lease_ttl, 3, limits=limits)
    return [job.key for job in batch.jobs]


def job(key: str, *, priority: int = 0, group: str | None = None,
        unique_for: float = 0.0) -> DispatchRequest:
    return dataclasses.replace(new_job(key), priority=priority, group=group,
                               unique_for=unique_for)


async def test_higher_priority_first_and_oldest_first_within_one(store: Store) -> None:
    for key, priority in [("low-1", 0), ("high-1", 9), ("mid", 4), ("low-2", 0), ("high-2", 9)]:
        await store.dispatch(job(key, priority=priority))

    assert await keys_claimed(store, 5) == ["high-1", "high-2", "mid", "low-1", "low-2"]
    assert (await store.job("mid")).priority == 4


async def test_a_high_priority_job_goes_first_behind_a_backlog(store: Store) -> None:
    await store.dispatch_many([job(f"low-{n}") for n in range(1000)])
    await store.dispatch(job("urgent", priority=9))

    assert await keys_claimed(store, 1) == ["urgent"]


async def test_a_released_job_keeps_its_priority(store: Store) -> None:
    await store.dispatch(job("high", priority=7))
    await store.dispatch(job("low"))
    (high,) = (await claim(store, 1)).jobs
    await store.release(high.lease, delay=0)

    assert await keys_claimed(store, 2) == ["high", "low"]


async def test_max_running_holds_across_supervisors_until_a_run_ends(store: Store) -> None:
    limits = {HANDLER: Limits(max_running=2)}
    await store.dispatch_many([job(f"j{n}") for n in range(5)])

    first = (await store.claim(OWNER, (HANDLER,), 5, LONG_TTL, 3, limits=limits)).jobs
    assert [j.key for j in first] == ["j0", "j1"]
    assert await keys_claimed(store, 5, owner="sup-b", limits=limits) == []
    await store.complete(first[0].lease, b"1")
    assert await keys_claimed(store, 5, owner="sup-b", limits=limits) == ["j2"]
    # Without the limit (another handler's view), the store hands out the rest.
    assert await keys_claimed(store, 5) == ["j3", "j4"]


async def test_a_crashed_supervisors_jobs_count_until_their_leases_are_recovered(
    store: Store,
) -> None:
    limits = {HANDLER: Limits(max_running=1)}
    await store.dispatch_many([job("crashed"), job("next")])
    assert await keys_claimed(store, 1, limits=limits, lease_ttl=SHORT_TTL) == ["crashed"]
    assert await keys_claimed(store, 1, owner="sup-b", limits=limits) == []
    await wait_for_expiry()

    batch = await claim_as_supervisors_do(store, 1, owner="sup-b", limits=limits)

    assert batch.recovered == 1
    assert (await store.job("crashed")).state in ("pending", "running")


async def test_max_running_per_group_limits_each_group_alone(store: Store) -> None:
    limits = {HANDLER: Limits(max_running_per_group=1)}
    await store.dispatch_many([job(f"a{n}", group="tenant-a") for n in range(3)]
                              + [job(f"b{n}", group="tenant-b") for n in range(3)]
                              + [job("free")])

    assert await keys_claimed(store, 10, limits=limits) == ["a0", "b0", "free"]
    assert (await store.job("a0")).group == "tenant-a"


async def test_a_rate_limit_allows_n_starts_in_any_period(store: Store) -> None:
    limits = {HANDLER: Limits(rate=Rate(2, 1.0))}
    await store.dispatch_many([job(f"j{n}") for n in range(5)])

    assert await keys_claimed(store, 5, limits=limits) == ["j0", "j1"]
    batch = await store.claim("sup-b", (HANDLER,), 5, LONG_TTL, 3, limits=limits)
    assert batch.jobs == ()
    assert batch.next_due_in is not None and 0 < batch.next_due_in <= 1.0
    await anyio.sleep(batch.next_due_in + 0.05)
    assert await keys_claimed(store, 5, owner="sup-b", limits=limits) == ["j2", "j3"]


async def test_a_paused_pool_starts_nothing_until_resumed(store: Store) -> None:
    await store.dispatch_many([job("j0"), job("j1")])
    await store.pause()

    assert await store.paused() == Paused(pool=True)
    assert (await store.snapshot()).paused == Paused(pool=True)
    assert await keys_claimed(store, 2) == []
    await store.resume()
    assert await store.paused() == Paused()
    assert await keys_claimed(store, 2) == ["j0", "j1"]


async def test_a_paused_handler_starts_nothing_while_others_do(store: Store) -> None:
    await store.dispatch_many([job("j0"), dataclasses.replace(job("other"), handler="resize")])
    await store.pause([HANDLER])

    batch = await store.claim(OWNER, (HANDLER, "resize"), 2, LONG_TTL, 3)

    assert [j.key for j in batch.jobs] == ["other"]
    assert await store.paused() == Paused(handlers=(HANDLER,))
    await store.resume()  # the pool's pause is not the handler's
    assert await keys_claimed(store, 1) == []
    await store.resume([HANDLER])
    assert await keys_claimed(store, 1) == ["j0"]


async def test_a_key_that_finished_within_its_unique_window_is_refused(store: Store) -> None:
    await store.dispatch(job("once"))
    (held,) = (await claim(store, 1)).jobs
    await store.complete(held.lease, b"1")

    with pytest.raises(JobExists, match="unique window of 60 s"):
        await store.dispatch(job("once", unique_for=60))
    await anyio.sleep(0.1)
    await store.dispatch(job("once", unique_for=0.05))
    assert (await store.job("once")).state == "pending"


async def test_max_pending_refuses_dispatches_once_reached(store: Store) -> None:
    await store.set_max_pending(2)
    refused = await store.dispatch_each([job("a"), job("b"), job("c"), job("a")])

    assert [type(r).__name__ if r else None for r in refused] == [None, None, "PoolFull",
                                                                  "JobExists"]
    assert "holds 2 pending jobs, its max_pending" in str(refused[2])
    with pytest.raises(PoolFull):
        await store.dispatch(job("d"))
    await store.set_max_pending(None)
    await store.dispatch(job("d"))


async def test_a_retried_job_keeps_its_priority_and_group(store: Store) -> None:
    await store.dispatch(job("again", priority=8, group="tenant-a"))
    (held,) = (await claim(store, 1)).jobs
    await store.fail(held.lease, "boom", final=True, retry_delay=0)
    await store.dispatch(job("plain"))

    await store.retry("again")

    assert await keys_claimed(store, 2) == ["again", "plain"]
    record = await store.job("again")
    assert (record.priority, record.group, record.attempts) == (8, "tenant-a", 1)
