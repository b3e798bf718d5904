"""Snooze (`sandbox.Snooze`): a run ends without spending an attempt, and the job is held
back for a while by the store's clock; fenced by the token like every end of a lease."""

from __future__ import annotations

import time

import anyio
import pytest

from supervisor.errors import StaleToken
from supervisor.store.base import Store
from supervisor.store.records import Lease, StoreEvent
from tests.store.support import OWNER, claim, claim_one, new_job, next_event, wait_for_work

pytestmark = pytest.mark.anyio

DELAY = 30.0


async def test_a_snooze_puts_the_job_back_without_spending_its_attempt(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=1))
    job = await claim_one(store)

    assert await store.snooze(job.lease, DELAY) == "pending"

    record = await store.job("k1")
    assert (record.state, record.attempts, record.snoozes) == ("pending", 0, 1)
    assert (record.lease_deadline, record.error) == (None, None)
    assert record.to_json()["snoozes"] == 1
    last = record.events[-1]
    assert (last.event, last.supervisor, last.token) == ("snoozed", OWNER, job.token)
    assert last.detail == "for 30 s"


async def test_a_snoozed_job_is_not_claimed_before_its_delay(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    snoozed_at = time.time()
    await store.snooze(job.lease, DELAY)

    batch = await claim(store)

    assert batch.jobs == ()
    assert batch.next_due_in is not None
    # by the store's clock: within the time the calls took of the delay
    assert DELAY - (time.time() - snoozed_at) - 1 <= batch.next_due_in <= DELAY + 0.1


async def test_the_run_after_a_snooze_has_the_same_attempt_and_counts_snoozes(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1", max_attempts=1))
    first = await claim_one(store)
    await store.snooze(first.lease, 0.2)
    await anyio.sleep(0.3)
    second = await claim_one(store)
    await store.snooze(second.lease, 0)

    third = await claim_one(store)

    assert (first.attempt, second.attempt, third.attempt) == (1, 1, 1)
    assert third.token > second.token > first.token
    record = await store.job("k1")
    assert (record.snoozes, record.attempts) == (2, 1)
    # a snoozed job's only attempt is still there to fail for good
    assert await store.fail(third.lease, "boom", final=False, retry_delay=0) == "failed"


async def test_a_stale_token_snoozes_nothing(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    before = await store.job("k1")

    with pytest.raises(StaleToken):
        await store.snooze(Lease("k1", job.token - 1, OWNER), DELAY)
    with pytest.raises(StaleToken):
        await store.snooze(Lease("k1", job.token, "sup-b"), DELAY)
    with pytest.raises(StaleToken):
        await store.snooze(Lease("gone", job.token, OWNER), DELAY)

    after = await store.job("k1")
    assert after == before
    assert (after.state, after.snoozes) == ("running", 0)


async def test_a_snooze_of_a_job_asked_to_stop_ends_it_stopped(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.stop("k1")

    assert await store.snooze(job.lease, DELAY) == "stopped"

    record = await store.job("k1")
    assert (record.state, record.snoozes) == ("stopped", 0)


async def test_a_stop_during_the_snooze_ends_the_job_stopped(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.snooze(job.lease, DELAY)

    assert await store.stop("k1") == "stopped"

    record = await store.job("k1")
    assert (record.state, record.snoozes) == ("stopped", 1)
    assert (await claim(store)).next_due_in is None


async def test_a_snooze_without_delay_wakes_a_supervisor_waiting_for_work(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, owner="sup-b")
    await wait_for_work(store)
    async with store.events(OWNER) as events:
        await store.snooze(job.lease, 0)

        assert await next_event(events, "wake") == StoreEvent("wake")


async def test_a_retry_and_a_new_dispatch_count_snoozes_from_zero(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.snooze(job.lease, 0)
    job = await claim_one(store)
    await store.fail(job.lease, "no", final=True, retry_delay=0)

    await store.retry("k1")
    retried = await store.job("k1")
    job = await claim_one(store)
    await store.complete(job.lease, b"1")
    await store.dispatch(new_job("k1"))

    assert retried.snoozes == 0
    assert (await store.job("k1")).snoozes == 0


async def test_a_snoozed_job_stopped_while_pending_does_not_say_it_never_ran(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.snooze(job.lease, DELAY)

    await store.stop("k1")

    record = await store.job("k1")
    assert record.state == "stopped"
    assert record.events[-1].detail == "stopped while pending"
