"""Change hints: wake, stop KEY, notify KEY."""

from __future__ import annotations

import pytest

from supervisor.store.base import Store
from supervisor.store.records import StoreEvent
from tests.store.support import claim_one, new_job, next_event

pytestmark = pytest.mark.anyio


async def test_dispatch_wakes_listeners(store: Store) -> None:
    async with store.events() as events:
        await store.dispatch(new_job("k1"))

        assert await next_event(events, "wake") == StoreEvent("wake")


async def test_stop_of_a_running_job_tells_listeners(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store)
    async with store.events() as events:
        await store.stop("k1")

        assert await next_event(events, "stop") == StoreEvent("stop", "k1")


async def test_notify_tells_listeners(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    async with store.events() as events:
        await store.notify("k1", b'{"resize": 2}')

        assert await next_event(events, "notify") == StoreEvent("notify", "k1")


async def test_release_wakes_listeners(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    async with store.events() as events:
        await store.release(job.lease)

        assert await next_event(events, "wake") == StoreEvent("wake")
