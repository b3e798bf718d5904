"""Waiting for a job's end (supervisor/waiting.py) on each store: prompt, without
polling Redis, safe against a lost hint, bounded by its timeout."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from supervisor.errors import JobNotFound, WaitTimedOut
from supervisor.store.base import Store
from supervisor.store.records import JobRecord, StoreEvent
from supervisor.waiting import wait_for_end
from tests.store.conftest import StoreTarget
from tests.store.support import claim_one, new_job

pytestmark = pytest.mark.anyio


class CountedReads:
    """The store, counting `job` reads; with `deaf`, its end hints never come."""

    def __init__(self, store: Store, *, deaf: bool = False) -> None:
        self._store = store
        self._deaf = deaf
        self.reads = 0

    async def job(self, key: str) -> JobRecord:
        self.reads += 1
        return await self._store.job(key)

    def job_ends(self, key: str) -> AbstractAsyncContextManager[AsyncIterator[StoreEvent]]:
        return self._silent() if self._deaf else self._store.job_ends(key)

    @asynccontextmanager
    async def _silent(self) -> AsyncIterator[AsyncIterator[StoreEvent]]:
        async def never() -> AsyncIterator[StoreEvent]:
            await anyio.sleep_forever()
            yield StoreEvent("wake")

        yield never()


async def wait_while_it_ends(store: Any, key: str, after: float, complete: Any,
                             **options: Any) -> tuple[JobRecord, float]:
    """Wait for `key` while `complete` ends it `after` seconds from now; the record and
    how long after the end the wait returned."""
    ended_at = 0.0
    async with anyio.create_task_group() as group:
        async def end_later() -> None:
            nonlocal ended_at
            await anyio.sleep(after)
            await complete()
            ended_at = time.monotonic()

        group.start_soon(end_later)
        record = await wait_for_end(store, key, 10.0, **options)
        returned_at = time.monotonic()
    return record, returned_at - ended_at


async def test_a_wait_returns_promptly_once_the_job_ends_without_polling(
    store: Store, store_target: StoreTarget
) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    counted = CountedReads(store)

    record, late_by = await wait_while_it_ends(
        counted, "k", 1.5, lambda: store.complete(job.lease, b'"done"'))

    assert (record.state, record.result) == ("succeeded", "done")
    if store_target.kind == "sqlite":
        assert late_by < 1.0  # a 0.2 s poll
    else:
        assert late_by < 0.5, late_by
        assert counted.reads <= 3, counted.reads  # the first read, the hint's, maybe one


class EndsRightAfterTheFirstRead(CountedReads):
    """The store, where the job ends just after the waiter's first read of it."""

    def __init__(self, store: Store, end: Any) -> None:
        super().__init__(store)
        self._end = end

    async def job(self, key: str) -> JobRecord:
        record = await super().job(key)
        if self.reads == 1:
            await self._end()
        return record


async def test_an_end_between_subscribing_and_the_first_read_is_not_missed(
    store: Store, store_target: StoreTarget
) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    racy = EndsRightAfterTheFirstRead(store, lambda: store.complete(job.lease, b"1"))

    with anyio.fail_after(1.0):  # well before the safety read at 5 s
        record = await wait_for_end(racy, "k", None)

    assert record.state == "succeeded"


async def test_a_lost_hint_is_made_up_for_by_the_safety_read(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)

    record, late_by = await wait_while_it_ends(
        CountedReads(store, deaf=True), "k", 0.2,
        lambda: store.fail(job.lease, "boom", final=True, retry_delay=0.0), reread_every=0.5)

    assert (record.state, record.error) == ("failed", "boom")
    assert late_by < 1.0


async def test_a_wait_runs_out_with_a_timeout_error_and_the_job_goes_on(store: Store) -> None:
    await store.dispatch(new_job("k"))
    await claim_one(store)
    started = time.monotonic()

    with pytest.raises(TimeoutError, match="'k' is still running") as raised:
        await wait_for_end(store, "k", 0.3)

    assert isinstance(raised.value, WaitTimedOut)
    assert 0.25 < time.monotonic() - started < 2.0
    assert (await store.job("k")).state == "running"


async def test_a_finished_job_is_answered_at_once(store: Store) -> None:
    await store.dispatch(new_job("k"))
    assert await store.stop("k") == "stopped"

    with anyio.fail_after(1.0):
        record = await wait_for_end(store, "k", None)

    assert record.state == "stopped"


async def test_an_unknown_key_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await wait_for_end(store, "ghost", 1.0)
