"""Checkpoints: saved under the lease, handed to every later attempt of the key, shown
in the job's record, and gone with a new dispatch."""

from __future__ import annotations

import time

import pytest

from supervisor.errors import StaleToken
from supervisor.store.base import Store
from supervisor.store.records import Lease
from tests.store.conftest import Connect
from tests.store.support import (
    OWNER,
    SHORT_TTL,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio

SAVED = b'{"offset": 42}'


async def test_a_first_attempt_has_no_checkpoint(store: Store) -> None:
    await store.dispatch(new_job("k1"))

    job = await claim_one(store)

    assert job.checkpoint is None
    record = await store.job("k1")
    assert (record.checkpoint, record.checkpoint_at) == (None, None)
    assert (record.to_json()["checkpoint"], record.to_json()["checkpoint_at"]) == (None, None)


async def test_a_released_job_is_claimed_again_with_its_checkpoint(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, SAVED)

    await store.release(job.lease)

    again = await claim_one(store, owner="sup-b")
    assert (again.owner, again.attempt, again.checkpoint) == ("sup-b", 1, SAVED)


async def test_a_retried_attempt_gets_the_checkpoint_of_the_failed_one(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=3))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, SAVED)

    assert await store.fail(job.lease, "boom", final=False, retry_delay=0) == "pending"

    again = await claim_one(store)
    assert (again.attempt, again.checkpoint) == (2, SAVED)


async def test_a_job_recovered_after_lease_expiry_keeps_its_checkpoint(
    store: Store, connect: Connect
) -> None:
    other = await connect()  # another supervisor's connection
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, lease_ttl=SHORT_TTL)
    await store.save_checkpoint(job.lease, SAVED)
    await wait_for_expiry()

    again = await claim_one(other, owner="sup-b")

    assert (again.owner, again.attempt, again.checkpoint) == ("sup-b", 1, SAVED)
    record = await other.job("k1")
    assert (record.lease_losses, record.checkpoint) == (1, {"offset": 42})


async def test_the_latest_checkpoint_wins(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, b'{"offset": 1}')
    first_at = (await store.job("k1")).checkpoint_at
    await store.save_checkpoint(job.lease, b'{"offset": 2}')
    await store.release(job.lease)

    record = await store.job("k1")
    assert record.checkpoint == {"offset": 2}
    assert first_at is not None and record.checkpoint_at is not None
    assert record.checkpoint_at >= first_at
    assert (await claim_one(store)).checkpoint == b'{"offset": 2}'


async def test_a_stale_lease_saves_nothing(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await store.save_checkpoint(old.lease, b'{"by": "old"}')
    await wait_for_expiry()
    current = await claim_one(store, owner="sup-b")
    await store.save_checkpoint(current.lease, b'{"by": "current"}')
    before = await store.job("k1")

    for lease in (old.lease, Lease("k1", current.token, OWNER),
                  Lease("k1", current.token + 1, "sup-b")):
        with pytest.raises(StaleToken):
            await store.save_checkpoint(lease, b'{"by": "stale"}')

    assert await store.job("k1") == before
    assert before.checkpoint == {"by": "current"}


async def test_a_job_not_running_takes_no_checkpoint(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.release(job.lease)
    with pytest.raises(StaleToken):
        await store.save_checkpoint(job.lease, SAVED)  # pending now
    job = await claim_one(store)
    await store.complete(job.lease, b"1")
    with pytest.raises(StaleToken):
        await store.save_checkpoint(job.lease, SAVED)  # finished now
    with pytest.raises(StaleToken):
        await store.save_checkpoint(Lease("unknown", 1, OWNER), SAVED)

    assert (await store.job("k1")).checkpoint is None


async def test_the_record_shows_the_checkpoint_and_when_it_was_saved(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    before = time.time()

    await store.save_checkpoint(job.lease, b'{"offset": 42, "parts": [1, 2]}')

    record = await store.job("k1")
    assert record.checkpoint == {"offset": 42, "parts": [1, 2]}
    assert record.checkpoint_at is not None
    assert abs(record.checkpoint_at - before) < 2
    assert record.started_at is not None and record.checkpoint_at >= record.started_at
    fields = record.to_json()
    assert (fields["checkpoint"], fields["checkpoint_at"]) == (
        {"offset": 42, "parts": [1, 2]}, record.checkpoint_at)
    (listed,) = await store.jobs("running")
    assert (listed.checkpoint, listed.checkpoint_at) == (record.checkpoint, record.checkpoint_at)
    (running,) = (await store.snapshot()).running
    assert (running.checkpoint, running.checkpoint_at) == (
        record.checkpoint, record.checkpoint_at)


async def test_a_finished_job_keeps_its_checkpoint_until_dispatched_again(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, SAVED)
    await store.complete(job.lease, b'{"ok": true}')

    finished = await store.job("k1")
    assert (finished.state, finished.checkpoint) == ("succeeded", {"offset": 42})
    assert finished.checkpoint_at is not None
    (listed,) = await store.jobs("succeeded")
    assert listed.checkpoint == {"offset": 42}

    await store.dispatch(new_job("k1"))

    record = await store.job("k1")
    assert (record.state, record.checkpoint, record.checkpoint_at) == ("pending", None, None)
    assert (await claim_one(store)).checkpoint is None


async def test_a_job_that_failed_for_good_keeps_its_checkpoint(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, SAVED)

    assert await store.fail(job.lease, "boom", final=True, retry_delay=0) == "failed"

    assert (await store.job("k1")).checkpoint == {"offset": 42}
