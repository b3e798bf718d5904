"""Claiming: order, handler sets, leases, tokens, and no double hand-out."""

from __future__ import annotations

import anyio
import pytest

from supervisor.store.base import Store
from tests.store.conftest import Connect
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    OWNER,
    claim,
    claim_one,
    dispatch_all,
    new_job,
)

pytestmark = pytest.mark.anyio


async def test_claim_hands_out_jobs_oldest_first(store: Store) -> None:
    await dispatch_all(store, ["c", "a", "d", "b", "e"])

    first = await claim(store, 2)
    rest = await claim(store, 10)

    assert [job.key for job in first.jobs] == ["c", "a"]
    assert [job.key for job in rest.jobs] == ["d", "b", "e"]
    assert (await claim(store, 10)).jobs == ()


async def test_claimed_job_carries_its_lease(store: Store) -> None:
    await store.dispatch(new_job("k1", payload=b'{"size": 2}', max_attempts=4))

    job = await claim_one(store, owner="sup-b")

    assert (job.key, job.handler, job.payload) == ("k1", HANDLER, b'{"size": 2}')
    assert (job.attempt, job.max_attempts, job.owner) == (1, 4, "sup-b")
    assert (job.lease.key, job.lease.token, job.lease.owner) == ("k1", job.token, "sup-b")
    record = await store.job("k1")
    assert (record.state, record.supervisor, record.token) == ("running", "sup-b", job.token)
    assert record.attempts == 1
    assert record.started_at is not None and record.lease_deadline is not None
    assert record.lease_deadline == pytest.approx(job.lease_deadline, abs=0.01)
    assert job.lease_deadline - record.started_at == pytest.approx(LONG_TTL, abs=0.5)


async def test_claim_takes_only_handlers_it_runs(store: Store) -> None:
    await store.dispatch(new_job("other-1", handler="other"))
    await store.dispatch(new_job("mine-1"))

    assert [j.key for j in (await claim(store, 5)).jobs] == ["mine-1"]
    assert (await claim(store, 5, handlers=[])).jobs == ()
    assert (await claim(store, 0, handlers=["other"])).jobs == ()
    assert (await store.job("other-1")).state == "pending"
    assert [j.key for j in (await claim(store, 5, handlers=["other", HANDLER])).jobs] == [
        "other-1"
    ]


async def test_jobs_of_unknown_handlers_do_not_block_others(store: Store) -> None:
    for index in range(20):
        await store.dispatch(new_job(f"other-{index}", handler="other"))
    await store.dispatch(new_job("mine"))

    assert [j.key for j in (await claim(store, 1)).jobs] == ["mine"]


async def test_concurrent_claims_never_hand_out_a_job_twice(connect: Connect) -> None:
    stores = [await connect() for _ in range(8)]
    keys = [f"job-{index:03d}" for index in range(200)]
    await dispatch_all(stores[0], keys)
    claimed: list[str] = []

    async def drain(store: Store, owner: str) -> None:
        while True:
            batch = await claim(store, 3, owner=owner)
            if not batch.jobs:
                return
            claimed.extend(job.key for job in batch.jobs)

    async with anyio.create_task_group() as group:
        for index, store in enumerate(stores):
            group.start_soon(drain, store, f"sup-{index}")

    assert len(claimed) == len(keys)
    assert sorted(claimed) == keys


async def test_tokens_strictly_increase_across_claims_and_redispatch(store: Store) -> None:
    tokens: list[int] = []
    for _ in range(3):
        await dispatch_all(store, ["k1", "k2"])
        for job in (await claim(store, 2)).jobs:
            tokens.append(job.token)
            await store.complete(job.lease, b"null")
    await store.dispatch(new_job("k1"))
    released = await claim_one(store)
    await store.release(released.lease)
    again = await claim_one(store)

    tokens += [released.token, again.token]
    assert tokens == sorted(set(tokens))
    assert again.owner == OWNER


async def test_a_backlog_of_another_handler_never_delays_claims(store: Store) -> None:
    for index in range(1000):
        await store.dispatch(new_job(f"other-{index:04d}", handler="other"))
    await store.dispatch(new_job("mine-1", handler="mine"))

    with anyio.fail_after(1):
        batch = await claim(store, 5, handlers=["mine"])

    assert [job.key for job in batch.jobs] == ["mine-1"]
    assert (await store.job("other-0000")).state == "pending"


async def test_claim_merges_the_queues_of_its_handlers_oldest_first(store: Store) -> None:
    for key, handler in [("a", "h1"), ("b", "h2"), ("c", "h3"), ("d", "h1"), ("e", "h2")]:
        await store.dispatch(new_job(key, handler=handler))

    batch = await claim(store, 3, handlers=["h2", "h1"])

    assert [job.key for job in batch.jobs] == ["a", "b", "d"]


async def test_next_due_in_ignores_retries_of_other_handlers(store: Store) -> None:
    await store.dispatch(new_job("theirs", handler="other"))
    (job,) = (await claim(store, 1, handlers=["other"])).jobs
    await store.fail(job.lease, "boom", final=False, retry_delay=60)

    assert (await claim(store, 1, handlers=["mine"])).next_due_in is None
    later = (await claim(store, 1, handlers=["mine", "other"])).next_due_in
    assert later is not None and 55 < later <= 60
