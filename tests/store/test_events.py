"""Change hints: wake, stop KEY, notify KEY, each for the supervisor it concerns."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace

import anyio
import pytest

from supervisor.store.base import Store
from supervisor.store.records import StoreEvent
from tests.store.conftest import StoreTarget
from tests.store.support import (
    OWNER,
    claim,
    claim_one,
    new_job,
    next_event,
    wait_for_work,
)

pytestmark = pytest.mark.anyio

SUPERVISORS = ("sup-1", "sup-2", "sup-3", "sup-4")


async def test_dispatch_wakes_a_supervisor_waiting_for_work(store: Store) -> None:
    await wait_for_work(store)
    async with store.events(OWNER) as events:
        await store.dispatch(new_job("k1"))

        assert await next_event(events, "wake") == StoreEvent("wake")


async def test_stop_of_a_running_job_tells_its_holder(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store)
    async with store.events(OWNER) as events:
        await store.stop("k1")

        assert await next_event(events, "stop") == StoreEvent("stop", "k1")


async def test_notify_of_a_running_job_tells_its_holder(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store)
    async with store.events(OWNER) as events:
        await store.notify("k1", b'{"resize": 2}')

        assert await next_event(events, "notify") == StoreEvent("notify", "k1")


async def test_release_wakes_a_supervisor_waiting_for_work(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, owner="sup-b")
    await wait_for_work(store)
    async with store.events(OWNER) as events:
        await store.release(job.lease)

        assert await next_event(events, "wake") == StoreEvent("wake")


async def woken(feeds: dict[str, AsyncIterator[StoreEvent]], within: float) -> list[str]:
    """The supervisors whose feed says `wake` within `within` seconds."""
    heard: list[str] = []

    async def listen(name: str, feed: AsyncIterator[StoreEvent]) -> None:
        async for event in feed:
            if event.kind == "wake":
                heard.append(name)
                return

    with anyio.move_on_after(within):
        async with anyio.create_task_group() as group:
            for name, feed in feeds.items():
                group.start_soon(listen, name, feed)
    return heard


async def hints_heard(store: Store, names: tuple[str, ...], act, within: float):  # type: ignore[no-untyped-def]
    async with AsyncExitStack() as stack:
        feeds = {name: await stack.enter_async_context(store.events(name)) for name in names}
        await act()
        return await woken(feeds, within)


async def test_a_dispatch_into_idle_supervisors_wakes_exactly_one(
    store: Store, store_target: StoreTarget
) -> None:
    if store_target.kind == "sqlite":
        pytest.skip("SQLite's supervisors share one host and poll its events table")
    for name in SUPERVISORS:
        await wait_for_work(store, owner=name)

    heard = await hints_heard(store, SUPERVISORS, lambda: store.dispatch(new_job("k1")), 1.0)

    assert len(heard) == 1, heard


async def test_a_supervisor_that_fills_up_with_work_left_wakes_the_next(
    store: Store, store_target: StoreTarget
) -> None:
    if store_target.kind == "sqlite":
        pytest.skip("SQLite's supervisors share one host and poll its events table")
    # Delayed jobs come due without a dispatch to wake anyone: the first claim that
    # finds more than it has room for passes the work on.
    run_at = time.time() + 0.3
    for key in ("k1", "k2"):
        await store.dispatch(replace(new_job(key), run_at=run_at))
    await wait_for_work(store, owner="sup-1")
    await wait_for_work(store, owner="sup-2")
    async with store.events("sup-2") as second:
        await anyio.sleep(max(0.0, run_at - time.time()) + 0.1)
        assert len((await claim(store, 1, owner="sup-1")).jobs) == 1

        assert await next_event(second, "wake") == StoreEvent("wake")


async def test_a_stop_reaches_only_the_supervisor_that_holds_the_job(
    store: Store, store_target: StoreTarget
) -> None:
    if store_target.kind == "sqlite":
        pytest.skip("SQLite's supervisors share one host and poll its events table")
    await store.dispatch(new_job("k1"))
    await claim_one(store, owner="sup-2")
    async with store.events("sup-1") as other, store.events("sup-2") as holder:
        await store.stop("k1")
        await store.notify("k1", b"{}")

        assert await next_event(holder, "stop") == StoreEvent("stop", "k1")
        assert await next_event(holder, "notify") == StoreEvent("notify", "k1")
        with anyio.move_on_after(0.5) as waited:
            await anext(other)
        assert waited.cancelled_caught
