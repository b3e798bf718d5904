"""Redis: a claim sent again after its reply was lost (the same claim id) hands out
nothing new and answers the jobs the lost claim handed out, so none is orphaned to run
out its lease (lua/claim-10+n.lua)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import pytest

from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import Completion
from tests.helpers.redis_server import RedisServer
from tests.store.support import HANDLER, OWNER, claim_one, new_job

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_server.url, pool_name) as store:
        yield store


async def test_a_claim_sent_again_answers_what_the_lost_one_handed_out(store: Store) -> None:
    for key in ("k1", "k2"):
        await store.dispatch(new_job(key))
    lost = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1")

    again = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1")

    assert [(job.key, job.token) for job in again.jobs] == \
        [(job.key, job.token) for job in lost.jobs] == [("k1", lost.jobs[0].token)]
    assert again.jobs[0].payload == lost.jobs[0].payload
    assert again.replayed and not lost.replayed
    assert (await store.job("k2")).state == "pending"
    nxt = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c2")
    assert [job.key for job in nxt.jobs] == ["k2"]


async def test_a_replay_leaves_out_jobs_no_longer_held_and_tells_the_completion(
    store: Store,
) -> None:
    for key in ("k1", "k2"):
        await store.dispatch(new_job(key))
    first = await claim_one(store)
    lost = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1",
                             completing=[Completion(first.lease, b"1")])
    (second,) = lost.jobs
    await store.complete(second.lease, b"2")

    again = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1",
                              completing=[Completion(first.lease, b"1")])

    assert (again.jobs, again.completed, lost.completed) == ((), (True,), (True,))
    assert (await store.job("k1")).result == 1


async def test_another_owner_replays_nothing_of_it(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1")

    other = await store.claim("sup-b", [HANDLER], 1, 30.0, 5, claim_id="c1")

    assert other.jobs == ()


async def test_a_replayed_claim_hands_back_the_trace_context_too(store: Store) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await store.dispatch(dataclasses.replace(new_job("k1"), traceparent=parent,
                                             tracestate="k=v"))
    await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1")

    again = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="c1")

    assert again.replayed
    assert [(job.traceparent, job.tracestate) for job in again.jobs] == [(parent, "k=v")]


async def test_each_lane_sends_its_own_lost_claim_again(store: Store) -> None:
    """Two claims in flight (one per lane), both replies lost: each sent again answers
    its own jobs."""
    for key in ("k1", "k2", "k3"):
        await store.dispatch(new_job(key))
    lost_first = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="a1", lane=0)
    lost_second = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="b1", lane=1)

    again_first = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="a1", lane=0)
    again_second = await store.claim(OWNER, [HANDLER], 1, 30.0, 5, claim_id="b1", lane=1)

    assert [job.key for job in again_first.jobs] == [job.key for job in lost_first.jobs] == ["k1"]
    assert [job.key for job in again_second.jobs] == \
        [job.key for job in lost_second.jobs] == ["k2"]
    assert again_first.replayed and again_second.replayed
    assert (await store.job("k3")).state == "pending"
