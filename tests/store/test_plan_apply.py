"""A producer's plan applied to a real store: chunked starts, stops of its own jobs only."""

from __future__ import annotations

import time

import anyio
import pytest

from supervisor.core.plans import Plan, PlannedJob
from supervisor.plan_apply import apply_plan
from supervisor.store.base import DispatchRequest, Store

pytestmark = pytest.mark.anyio


def planned(key: str) -> PlannedJob:
    return PlannedJob(key=key, handler="follow", payload=b"{}")


async def live_keys(store: Store) -> set[str]:
    return {r.key for r in [*await store.jobs("pending"), *await store.jobs("running")]}


async def test_a_plan_of_10000_starts_is_applied_in_chunks_without_holding_the_store(
    store: Store,
) -> None:
    plan = Plan(start=tuple(planned(f"feed-{n}") for n in range(10_000)))
    slowest = 0.0

    async def probe() -> None:
        # Another client's calls keep being answered while the plan is applied.
        nonlocal slowest
        while True:
            sent = time.monotonic()
            await store.ping()
            slowest = max(slowest, time.monotonic() - sent)
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(probe)
        counts = await apply_plan(store, "feeds", plan, max_attempts=lambda _h: 3)
        group.cancel_scope.cancel()
    assert counts == {"started": 10_000, "kept": 0, "stopped": 0}
    assert len(await store.live_keys_of_schedule("feeds")) == 10_000
    assert slowest < 2.0, f"a store call waited {slowest:.2f} s behind the plan"
    again = await apply_plan(store, "feeds", plan, max_attempts=lambda _h: 3)
    assert again == {"started": 0, "kept": 10_000, "stopped": 0}


async def test_stop_others_stops_only_the_schedules_own_jobs(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="manual", handler="follow", payload=b"{}",
                                         max_attempts=1))
    await store.dispatch(DispatchRequest(key="other", handler="follow", payload=b"{}",
                                         max_attempts=1, schedule="elsewhere"))
    first = Plan(start=(planned("a"), planned("b")))
    assert await apply_plan(store, "feeds", first, max_attempts=lambda _h: 1) == {
        "started": 2, "kept": 0, "stopped": 0}
    second = Plan(start=(planned("b"), planned("c")), stop_others=True)
    assert await apply_plan(store, "feeds", second, max_attempts=lambda _h: 1) == {
        "started": 1, "kept": 1, "stopped": 1}
    assert await live_keys(store) == {"manual", "other", "b", "c"}
    assert (await store.job("a")).state == "stopped"
    named = Plan(stop=("manual", "gone"))
    assert await apply_plan(store, "feeds", named, max_attempts=lambda _h: 1) == {
        "started": 0, "kept": 0, "stopped": 1}
    assert (await store.job("manual")).state == "stopped"
