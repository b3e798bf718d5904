"""retry: a failed or stopped job becomes pending again, attempts from 1; live, succeeded
and unknown keys are refused."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import DispatchRefused, JobExists, JobNotFound
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest, JobState
from tests.store.conftest import Connect
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def failed_job(store: Store, key: str = "k") -> int:
    """A job that failed for good after two attempts; its last token."""
    await store.dispatch(new_job(key, payload=b'{"p": 1}', max_attempts=2))
    for _ in range(2):
        job = await claim_one(store)
        await store.fail(job.lease, "boom\ntraceback", final=False, retry_delay=0.0)
    record = await store.job(key)
    assert (record.state, record.attempts) == ("failed", 2)
    return job.token


async def test_a_failed_job_runs_again_from_attempt_one(store: Store) -> None:
    last_token = await failed_job(store)

    await store.retry("k")

    record = await store.job("k")
    assert (record.state, record.attempts, record.error, record.finished_at) == (
        "pending", 0, None, None)
    assert (record.handler, record.payload, record.max_attempts) == ("thumbnail", {"p": 1}, 2)
    again = await claim_one(store)
    assert (again.key, again.attempt, again.payload) == ("k", 1, b'{"p": 1}')
    assert again.token > last_token
    assert (await store.job("k")).state == "running"


async def test_a_stopped_running_job_runs_again_without_its_stop(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    assert await store.stop("k") == "running"
    await store.finish_stopped(job.lease, "stopped by a user")

    await store.retry("k")

    record = await store.job("k")
    assert (record.state, record.stop_requested, record.error) == ("pending", False, None)
    again = await claim_one(store)
    renewed = await store.renew(again.owner, "i-1", [again.lease], LONG_TTL, {})
    assert not renewed.stop_requested and not renewed.lost
    await store.complete(again.lease, b'"done"')
    assert (await store.job("k")).state == "succeeded"


async def test_a_job_stopped_before_it_ran_can_be_retried(store: Store) -> None:
    await store.dispatch(new_job("k"))
    assert await store.stop("k") == "stopped"

    await store.retry("k")

    assert (await claim_one(store)).attempt == 1


async def test_retry_resets_lease_losses(store: Store) -> None:
    await store.dispatch(new_job("k"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=1)
    await wait_for_expiry()
    await claim_as_supervisors_do(store, 0, max_lease_losses=1)
    lost = await store.job("k")
    assert (lost.state, lost.lease_losses) == ("failed", 1)

    await store.retry("k")

    record = await store.job("k")
    assert (record.state, record.lease_losses, record.attempts) == ("pending", 0, 0)


@pytest.mark.parametrize("state", ["pending", "running"])
async def test_a_live_job_is_refused_as_existing(store: Store, state: JobState) -> None:
    await store.dispatch(new_job("k"))
    if state == "running":
        await claim_one(store)

    with pytest.raises(JobExists, match="'k'"):
        await store.retry("k")

    assert (await store.job("k")).state == state


async def test_a_succeeded_job_is_refused(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)
    await store.complete(job.lease, b"1")

    with pytest.raises(DispatchRefused, match="succeeded") as refused:
        await store.retry("k")

    assert not isinstance(refused.value, JobExists)
    record = await store.job("k")
    assert (record.state, record.result) == ("succeeded", 1)


async def test_an_unknown_key_is_not_found(store: Store) -> None:
    with pytest.raises(JobNotFound, match="'ghost'"):
        await store.retry("ghost")


async def test_a_retried_job_outlives_the_retention_of_its_failure(connect: Connect) -> None:
    store = await connect(retention=1.0)
    await failed_job(store)
    await store.retry("k")

    await anyio.sleep(1.5)
    await claim(store, 0)  # the SQLite store drops old records in claims

    assert (await store.job("k")).state == "pending"
    assert [record.key for record in await store.jobs("failed")] == []
    assert [record.key for record in await store.jobs("pending")] == ["k"]


async def test_a_retried_job_keeps_its_checkpoint(store: Store) -> None:
    await store.dispatch(new_job("k", max_attempts=1))
    job = await claim_one(store)
    await store.save_checkpoint(job.lease, b'{"offset": 42}')
    await store.fail(job.lease, "boom", final=True, retry_delay=0.0)

    await store.retry("k")

    assert (await claim_one(store)).checkpoint == b'{"offset": 42}'


async def test_job_end_hints_come_when_the_job_ends(store: Store) -> None:
    await store.dispatch(new_job("k"))
    job = await claim_one(store)

    async with store.job_ends("k") as hints, anyio.create_task_group() as group:
        async def complete_soon() -> None:
            await anyio.sleep(0.3)
            await store.complete(job.lease, b"1")

        group.start_soon(complete_soon)
        with anyio.fail_after(2.0):
            while (await store.job("k")).state != "succeeded":
                await anext(hints)


async def test_a_retried_job_of_a_schedule_is_among_its_live_jobs_again(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="k", handler=HANDLER, payload=b"{}", max_attempts=1,
                                         schedule="feeds"))
    job = await claim_one(store)
    await store.fail(job.lease, "boom", final=True, retry_delay=0.0)
    assert await store.live_keys_of_schedule("feeds") == []  # drops the index entry

    await store.retry("k")

    assert await store.live_keys_of_schedule("feeds") == ["k"]
    assert (await store.job("k")).schedule == "feeds"
