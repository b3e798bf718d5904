"""A producer's plan applied to a real store: chunked starts, stops of its own jobs only,
every write guarded by the plan's tick."""

from __future__ import annotations

import time
from dataclasses import replace

import anyio
import pytest

from supervisor.core.plans import Plan, PlannedJob
from supervisor.errors import StaleTick
from supervisor.pool.plan_apply import apply_plan
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest, FiredTick, TickRequest

pytestmark = pytest.mark.anyio


def planned(key: str) -> PlannedJob:
    return PlannedJob(key=key, handler="follow", payload=b"{}")


async def live_keys(store: Store) -> set[str]:
    return {r.key for r in [*await store.jobs("pending"), *await store.jobs("running")]}


TICK = 1_700_000_000.0  # long past: every not_before at it is due


async def fire(store: Store, tick: float, owner: str, schedule: str = "feeds") -> FiredTick:
    result = await store.fire_tick(TickRequest(schedule=schedule, tick=tick, not_before=tick,
                                               fingerprint="fp", owner=owner))
    assert result.outcome == "fired"
    return FiredTick(schedule=schedule, tick=tick, owner=owner)


async def test_a_plan_of_10000_starts_is_applied_in_chunks_without_holding_the_store(
    store: Store,
) -> None:
    fired = await fire(store, TICK, "sup-a")
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
        counts = await apply_plan(store, fired, plan, max_attempts=lambda _h: 3)
        group.cancel_scope.cancel()
    assert counts == {"started": 10_000, "kept": 0, "stopped": 0}
    assert len(await store.live_keys_of_schedule("feeds")) == 10_000
    assert slowest < 2.0, f"a store call waited {slowest:.2f} s behind the plan"
    again = await apply_plan(store, fired, plan, max_attempts=lambda _h: 3)
    assert again == {"started": 0, "kept": 10_000, "stopped": 0}


async def test_stop_others_stops_only_the_schedules_own_jobs(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="manual", handler="follow", payload=b"{}",
                                         max_attempts=1))
    await store.dispatch(DispatchRequest(key="other", handler="follow", payload=b"{}",
                                         max_attempts=1, schedule="elsewhere"))
    fired = await fire(store, TICK, "sup-a")
    first = Plan(start=(planned("a"), planned("b")))
    assert await apply_plan(store, fired, first, max_attempts=lambda _h: 1) == {
        "started": 2, "kept": 0, "stopped": 0}
    second = Plan(start=(planned("b"), planned("c")), stop_others=True)
    assert await apply_plan(store, fired, second, max_attempts=lambda _h: 1) == {
        "started": 1, "kept": 1, "stopped": 1}
    assert await live_keys(store) == {"manual", "other", "b", "c"}
    assert (await store.job("a")).state == "stopped"
    named = Plan(stop=("manual", "gone"))
    assert await apply_plan(store, fired, named, max_attempts=lambda _h: 1) == {
        "started": 0, "kept": 0, "stopped": 1}
    assert (await store.job("manual")).state == "stopped"


async def test_a_plan_of_an_older_tick_applied_after_a_newer_one_changes_nothing(
    store: Store,
) -> None:
    older = await fire(store, TICK, "sup-a")
    newer = await fire(store, TICK + 60, "sup-b")
    assert await apply_plan(store, newer, Plan(start=(planned("b"),), stop_others=True),
                            max_attempts=lambda _h: 1) == {"started": 1, "kept": 0, "stopped": 0}
    with pytest.raises(StaleTick):
        await apply_plan(store, older, Plan(start=(planned("a"),), stop_others=True),
                         max_attempts=lambda _h: 1)
    with pytest.raises(StaleTick):
        await apply_plan(store, older, Plan(stop=("b",)), max_attempts=lambda _h: 1)
    assert await live_keys(store) == {"b"}
    assert (await store.job("b")).state == "pending"


async def test_each_write_of_a_plan_checks_its_tick_in_the_store(store: Store) -> None:
    fired = await fire(store, TICK, "sup-a")
    job = DispatchRequest(key="a", handler="follow", payload=b"{}", max_attempts=1,
                          schedule="feeds")
    assert await store.dispatch_many([job], fired=fired) == [True]
    await store.dispatch(DispatchRequest(key="b", handler="follow", payload=b"{}",
                                         max_attempts=1, schedule="feeds"))
    assert await store.record_tick_outcome(fired, "applied", b"{}")
    # Its outcome recorded, the tick's plan is over: a straggler of it changes nothing.
    with pytest.raises(StaleTick):
        await store.stop("a", fired=fired)
    with pytest.raises(StaleTick):
        await store.dispatch_many([replace(job, key="c")], fired=fired)
    assert not await store.record_tick_outcome(fired, "error", b'"late"')
    # Another supervisor's tick: this one's writes are refused too.
    later = await fire(store, TICK + 60, "sup-b")
    with pytest.raises(StaleTick):
        await store.stop("b", fired=FiredTick(schedule="feeds", tick=TICK + 60, owner="sup-a"))
    assert await store.stop("b", fired=later) == "stopped"
    assert await live_keys(store) == {"a"}

