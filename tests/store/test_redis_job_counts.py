"""Redis: a start and an end tell from the job hash whether a job has notes (`notes_sent`,
`notes_acked`) and output (`output_runs`) without reading those keys; a job made before
they were kept (none in its hash) is read the old way, and its notes and output are
neither lost nor left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as redis

from supervisor.store import opened_store
from supervisor.store.base import Store
from supervisor.store.records import Completion
from supervisor.store.redis.keys import PoolKeys
from tests.helpers.redis_server import RedisServer
from tests.store.support import HANDLER, OWNER, claim_one, new_job

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(redis_server: RedisServer, pool_name: str) -> AsyncIterator[Store]:
    async with opened_store(redis_server.url, pool_name) as store:
        yield store


@pytest.mark.parametrize("kept_before", [False, True], ids=["now", "from-before"])
async def test_a_job_with_notes_is_started_with_them_and_ended_without(
    store: Store, redis_server: RedisServer, pool_name: str, kept_before: bool,
) -> None:
    keys = PoolKeys(pool_name)
    client = redis.Redis.from_url(redis_server.url)
    await store.dispatch(new_job("k1"))
    await store.notify("k1", b'{"n": 1}')
    await store.notify("k1", b'{"n": 2}')
    if kept_before:  # made and notified by a supervisor that kept no count
        await client.hdel(keys.job("k1"), "notes_sent")

    job = await claim_one(store)
    assert job.has_notes
    (first, _) = await store.take_notifications(job.lease)
    await store.ack_notifications(job.lease, first.seq)
    await store.release(job.lease)
    if kept_before:
        await client.hdel(keys.job("k1"), "notes_sent")
    again = await claim_one(store)
    assert again.has_notes  # one of the two is still unacknowledged
    batch = await store.claim(OWNER, [HANDLER], 0, 30.0, 5, only_completing=True,
                              completing=[Completion(again.lease, b"1")])

    assert batch.completed == (True,)
    assert await client.exists(keys.notes("k1")) == 0
    await client.aclose()


async def test_a_job_whose_notes_are_all_acknowledged_starts_without(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await store.notify("k1", b"1")
    job = await claim_one(store)
    (note,) = await store.take_notifications(job.lease)
    await store.ack_notifications(job.lease, note.seq)
    await store.release(job.lease)

    assert not (await claim_one(store)).has_notes


@pytest.mark.parametrize("kept_before", [False, True], ids=["now", "from-before"])
async def test_an_ended_jobs_output_expires_with_its_record(
    store: Store, redis_server: RedisServer, pool_name: str, kept_before: bool,
) -> None:
    keys = PoolKeys(pool_name)
    client = redis.Redis.from_url(redis_server.url)
    for key in ("quiet", "loud"):
        await store.dispatch(new_job(key))
    quiet, loud = await claim_one(store), await claim_one(store)
    await store.append_output(loud.lease, loud.attempt, b"hello\n", at=0, max_bytes=1000,
                              ended=True)
    if kept_before:
        await client.hdel(keys.job("loud"), "output_runs")

    for job in (quiet, loud):
        await store.complete(job.lease, b"1")

    assert await client.exists(keys.output("quiet")) == 0
    names = [keys.output("loud"), keys.output_run("loud", loud.token)]
    assert [await client.pttl(name) > 0 for name in names] == [True, True]
    await client.aclose()
