"""dispatch_many: many jobs in one atomic call, live keys left as they are."""

from __future__ import annotations

import time

import pytest

from supervisor.store.base import Store
from supervisor.store.records import DISPATCH_CHUNK, DispatchRequest
from tests.store.support import HANDLER, claim, claim_one, new_job

pytestmark = pytest.mark.anyio


async def test_dispatch_many_creates_new_keys_and_leaves_live_ones(store: Store) -> None:
    await store.dispatch(new_job("live", payload=b'{"first": true}'))

    created = await store.dispatch_many([
        new_job("a", payload=b'{"a": 1}'),
        new_job("live", payload=b'{"second": true}'),
        new_job("b", payload=b'{"b": 2}', max_attempts=7),
    ])

    assert created == [True, False, True]
    live = await store.job("live")
    assert (live.state, live.payload) == ("pending", {"first": True})
    b = await store.job("b")
    assert (b.state, b.payload, b.max_attempts, b.handler) == ("pending", {"b": 2}, 7, HANDLER)
    assert sorted(job.key for job in (await claim(store, 10)).jobs) == ["a", "b", "live"]


async def test_dispatch_many_leaves_a_running_key_and_replaces_a_finished_one(
    store: Store,
) -> None:
    await store.dispatch(new_job("done"))
    done = await claim_one(store)
    await store.complete(done.lease, b"1")
    await store.dispatch(new_job("running"))
    running = await claim_one(store)
    await store.notify("running", b"{}")

    created = await store.dispatch_many([new_job("done", payload=b'{"again": 1}'),
                                         new_job("running", payload=b'{"again": 1}')])

    assert created == [True, False]
    again = await store.job("done")
    assert (again.state, again.payload, again.result, again.attempts) == (
        "pending", {"again": 1}, None, 0)
    still = await store.job("running")
    assert (still.state, still.token, still.payload) == ("running", running.token, {"n": 1})
    assert len(await store.take_notifications(running.lease)) == 1


async def test_a_key_twice_in_one_call_is_created_once(store: Store) -> None:
    created = await store.dispatch_many([new_job("k", payload=b"1"), new_job("k", payload=b"2")])

    assert created == [True, False]
    assert (await store.job("k")).payload == 1


async def test_dispatch_many_of_nothing_is_nothing(store: Store) -> None:
    assert await store.dispatch_many([]) == []


async def test_dispatch_many_takes_run_at_and_schedule_per_request(store: Store) -> None:
    later = time.time() + 60
    created = await store.dispatch_many([
        DispatchRequest(key="later", handler=HANDLER, payload=b"{}", max_attempts=1,
                        run_at=later, schedule="feeds"),
        DispatchRequest(key="now", handler=HANDLER, payload=b"{}", max_attempts=1,
                        schedule="feeds"),
    ])

    assert created == [True, True]
    batch = await claim(store, 5)
    assert [job.key for job in batch.jobs] == ["now"]
    assert batch.next_due_in == pytest.approx(60, abs=1)
    record = await store.job("later")
    assert record.schedule == "feeds"
    assert record.run_at == pytest.approx(later, abs=0.001)


async def test_a_full_chunk_goes_in_one_call_across_handlers(store: Store) -> None:
    requests = [new_job(f"k{i:03}", handler=f"h{i % 3}") for i in range(DISPATCH_CHUNK)]

    created = await store.dispatch_many(requests)

    assert created == [True] * DISPATCH_CHUNK
    assert len(await store.jobs("pending")) == DISPATCH_CHUNK
    batch = await claim(store, DISPATCH_CHUNK, handlers=["h1"])
    assert len(batch.jobs) == len([i for i in range(DISPATCH_CHUNK) if i % 3 == 1])
