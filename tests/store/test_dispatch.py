"""Dispatch, lookup and listing."""

from __future__ import annotations

import time

import pytest

from supervisor.errors import JobExists, JobNotFound
from supervisor.store.base import Store
from supervisor.store.records import JobStats
from tests.store.support import HANDLER, claim, claim_one, dispatch_all, new_job

pytestmark = pytest.mark.anyio


async def test_dispatch_creates_a_pending_record(store: Store) -> None:
    before = time.time()
    await store.dispatch(new_job("k1", payload=b'{"x": [1, 2]}', max_attempts=4))

    record = await store.job("k1")

    assert (record.key, record.handler, record.state) == ("k1", HANDLER, "pending")
    assert (record.attempts, record.max_attempts) == (0, 4)
    assert record.payload == {"x": [1, 2]}
    assert (record.supervisor, record.result, record.error) == (None, None, None)
    assert abs(record.created_at - before) < 5
    assert (record.started_at, record.finished_at, record.lease_deadline) == (None, None, None)
    assert (record.lease_losses, record.stop_requested, record.stats) == (0, False, JobStats())
    assert record.to_json()["payload"] == {"x": [1, 2]}


async def test_dispatch_answers_the_record_it_made(store: Store) -> None:
    made = await store.dispatch(new_job("k1", payload=b'{"x": 1}', max_attempts=2))
    assert made == await store.job("k1")
    assert (made.key, made.state, made.payload) == ("k1", "pending", {"x": 1})
    # Again, over a finished record of the key: the new one's.
    await store.stop("k1")
    again = await store.dispatch(new_job("k1", payload=b'{"x": 2}'))
    assert again == await store.job("k1")
    assert (again.state, again.payload) == ("pending", {"x": 2})


async def test_dispatch_of_a_live_key_raises_job_exists(store: Store) -> None:
    await store.dispatch(new_job("k1", payload=b'{"first": true}'))
    with pytest.raises(JobExists):
        await store.dispatch(new_job("k1", payload=b'{"second": true}'))
    await claim_one(store)
    with pytest.raises(JobExists):
        await store.dispatch(new_job("k1", payload=b'{"third": true}'))

    record = await store.job("k1")
    assert (record.state, record.payload) == ("running", {"first": True})


async def test_a_finished_key_can_be_dispatched_again(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b'{"done": 1}')

    await store.dispatch(new_job("k1", payload=b'{"again": true}', max_attempts=5))

    record = await store.job("k1")
    assert (record.state, record.attempts, record.max_attempts) == ("pending", 0, 5)
    assert (record.payload, record.result, record.finished_at) == ({"again": True}, None, None)
    assert [j.key for j in (await claim(store)).jobs] == ["k1"]


async def test_redispatch_drops_notifications_left_from_the_old_record(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await store.notify("k1", b'{"old": true}')
    assert await store.stop("k1") == "stopped"

    await store.dispatch(new_job("k1"))
    job = await claim_one(store)

    assert await store.take_notifications(job.lease) == []


async def test_unknown_key_raises_job_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound):
        await store.job("nope")
    with pytest.raises(JobNotFound):
        await store.stop("nope")
    with pytest.raises(JobNotFound):
        await store.notify("nope", b"{}")


async def test_jobs_lists_records_oldest_first_and_by_state(store: Store) -> None:
    await dispatch_all(store, ["c", "a", "b"])
    first = await claim_one(store)
    await store.complete(first.lease, b"null")
    await claim_one(store)

    assert [r.key for r in await store.jobs()] == ["c", "a", "b"]
    assert [r.key for r in await store.jobs("succeeded")] == ["c"]
    assert [r.key for r in await store.jobs("running")] == ["a"]
    assert [r.key for r in await store.jobs("pending")] == ["b"]
    assert await store.jobs("failed") == []
    assert await store.jobs("stopped") == []
