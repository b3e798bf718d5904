"""Complete, fail, release and finish_stopped, and fencing by token."""

from __future__ import annotations

import anyio
import pytest

from supervisor.errors import StaleToken
from supervisor.store.base import Store
from supervisor.store.records import Completion, Lease
from tests.store.support import (
    OWNER,
    SHORT_TTL,
    claim,
    claim_one,
    dispatch_all,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def test_complete_records_the_result(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)

    await store.complete(job.lease, b'{"ok": true}')

    record = await store.job("k1")
    assert (record.state, record.result, record.error) == ("succeeded", {"ok": True}, None)
    assert (record.attempts, record.supervisor, record.lease_deadline) == (1, OWNER, None)
    assert record.finished_at is not None and record.started_at is not None
    assert record.finished_at >= record.started_at


async def test_complete_sent_again_after_a_lost_reply_finds_its_result_stored(
    store: Store,
) -> None:
    """A settle whose reply was lost tries again: the result is there, under its own
    token, so the second try succeeds and changes nothing."""
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b'{"ok": true}')
    stored = await store.job("k1")

    await store.complete(job.lease, b'{"ok": true}')

    assert await store.job("k1") == stored
    with pytest.raises(StaleToken):  # another run's lease does not own that result
        await store.complete(Lease("k1", job.token, "sup-b"), b'{"ok": true}')
    with pytest.raises(StaleToken):
        await store.complete(Lease("k1", job.token - 1, OWNER), b'{"ok": true}')


async def test_a_claim_completes_the_job_whose_slot_it_fills(store: Store) -> None:
    await dispatch_all(store, ["k1", "k2"])
    first = await claim_one(store)

    batch = await store.claim(OWNER, ["thumbnail"], 1, 30.0, 3,
                              completing=[Completion(first.lease, b'{"ok": 1}')])

    assert batch.completed == (True,)
    assert [job.key for job in batch.jobs] == ["k2"]
    record = await store.job("k1")
    assert (record.state, record.result, record.lease_deadline) == ("succeeded", {"ok": 1}, None)
    assert (await store.job("k2")).state == "running"
    assert (await claim(store)).completed == ()  # nothing asked


async def test_a_claim_completes_several_jobs_in_order(store: Store) -> None:
    await dispatch_all(store, ["k1", "k2", "k3"])
    first = await claim_one(store)
    second = await claim_one(store)

    batch = await store.claim(OWNER, ["thumbnail"], 1, 30.0, 3, completing=[
        Completion(first.lease, b'"a"'), Completion(Lease("k9", 1, OWNER), b"0"),
        Completion(second.lease, b'{"b": [1, "\\u00e9"]}')])

    assert batch.completed == (True, False, True)
    assert [job.key for job in batch.jobs] == ["k3"]
    assert (await store.job("k1")).result == "a"
    assert (await store.job("k2")).result == {"b": [1, "\u00e9"]}


async def test_a_claim_only_completing_stores_the_results_and_starts_nothing(
    store: Store,
) -> None:
    await dispatch_all(store, ["k1", "k2"])
    first = await claim_one(store)

    batch = await store.claim(OWNER, ["thumbnail"], 0, 30.0, 3, only_completing=True,
                              completing=[Completion(first.lease, b'{"ok": 1}'),
                                          Completion(Lease("k9", 1, OWNER), b"0")])

    assert (batch.completed, batch.jobs) == ((True, False), ())
    assert (await store.job("k1")).result == {"ok": 1}
    assert (await store.job("k2")).state == "pending"
    again = await store.claim(OWNER, ["thumbnail"], 0, 30.0, 3, only_completing=True,
                              completing=[Completion(first.lease, b'{"ok": 1}')])
    assert again.completed == (True,)  # sent again after a lost reply: stored once


async def test_a_claim_only_completing_recovers_no_lease(store: Store) -> None:
    await dispatch_all(store, ["k1", "k2"])
    done = await claim_one(store)
    await claim_one(store, owner="sup-b", lease_ttl=SHORT_TTL)
    await wait_for_expiry()

    batch = await store.claim(OWNER, ["thumbnail"], 0, 30.0, 3, only_completing=True,
                              completing=[Completion(done.lease, b"1")])

    assert (batch.completed, batch.recovered, batch.recoveries) == ((True,), 0, ())
    assert (await store.job("k2")).state == "running"  # its lease waits for a claim


async def test_a_claim_completing_a_stale_lease_stores_nothing_and_still_claims(
    store: Store,
) -> None:
    await dispatch_all(store, ["k1"])
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    current = await claim_one(store, owner="sup-b")
    await store.dispatch(new_job("k2"))
    before = await store.job("k1")

    batch = await store.claim(OWNER, ["thumbnail"], 1, 30.0, 3,
                              completing=[Completion(old.lease, b"1")])

    assert batch.completed == (False,)
    assert [job.key for job in batch.jobs] == ["k2"]
    assert await store.job("k1") == before
    assert current.token > old.token


async def test_a_stale_lease_changes_nothing(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    current = await claim_one(store, owner="sup-b")
    assert current.token > old.token
    before = await store.job("k1")
    wrong_owner = Lease("k1", current.token, OWNER)

    for lease in (old.lease, wrong_owner):
        with pytest.raises(StaleToken):
            await store.complete(lease, b"1")
        with pytest.raises(StaleToken):
            await store.fail(lease, "boom", final=True, retry_delay=0)
        with pytest.raises(StaleToken):
            await store.release(lease)
        with pytest.raises(StaleToken):
            await store.finish_stopped(lease, "stopped")

    assert await store.job("k1") == before


async def test_failed_attempt_is_retried_after_the_delay(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=3))
    job = await claim_one(store)

    assert await store.fail(job.lease, "boom", final=False, retry_delay=1.0) == "pending"

    record = await store.job("k1")
    assert (record.state, record.error, record.attempts) == ("pending", "boom", 1)
    held_back = await claim(store)
    assert held_back.jobs == ()
    assert held_back.next_due_in is not None and 0.5 < held_back.next_due_in <= 1.0
    await anyio.sleep(held_back.next_due_in + 0.1)
    again = await claim_one(store)
    assert again.attempt == 2


async def test_no_next_due_in_without_held_back_jobs(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    assert (await claim(store, 0)).next_due_in is None


async def test_final_failure_ends_the_job(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=3))
    job = await claim_one(store)

    assert await store.fail(job.lease, "bad input", final=True, retry_delay=5) == "failed"

    record = await store.job("k1")
    assert (record.state, record.error, record.attempts) == ("failed", "bad input", 1)
    assert record.finished_at is not None


async def test_failure_of_the_last_attempt_ends_the_job(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=2))
    first = await claim_one(store)
    assert await store.fail(first.lease, "one", final=False, retry_delay=0) == "pending"
    second = await claim_one(store)

    assert await store.fail(second.lease, "two", final=False, retry_delay=0) == "failed"

    record = await store.job("k1")
    assert (record.state, record.error, record.attempts) == ("failed", "two", 2)


async def test_release_requeues_ahead_of_newer_jobs_without_spending_an_attempt(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await dispatch_all(store, ["k2", "k3"])

    await store.release(job.lease)

    record = await store.job("k1")
    assert (record.state, record.attempts, record.lease_deadline) == ("pending", 0, None)
    batch = await claim(store, 3)
    assert [j.key for j in batch.jobs] == ["k1", "k2", "k3"]
    assert batch.jobs[0].attempt == 1


async def test_max_attempts_zero_leaves_the_limit_to_the_supervisor(store: Store) -> None:
    await store.dispatch(new_job("k1", max_attempts=0))
    for attempt in range(1, 4):
        job = await claim_one(store)
        assert job.attempt == attempt
        assert await store.fail(job.lease, "again", final=False, retry_delay=0) == "pending"
    job = await claim_one(store)
    assert await store.fail(job.lease, "enough", final=True, retry_delay=0) == "failed"


async def test_release_with_a_delay_holds_the_job_back(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)

    await store.release(job.lease, delay=30)
    await store.dispatch(new_job("k2"))

    batch = await claim(store, 5)
    assert [j.key for j in batch.jobs] == ["k2"]
    assert batch.next_due_in is not None and 25 < batch.next_due_in <= 30
    record = await store.job("k1")
    assert (record.state, record.attempts) == ("pending", 0)


async def test_release_with_a_short_delay_is_claimable_after_it(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)

    await store.release(job.lease, delay=0.3)
    assert (await claim(store)).jobs == ()
    await anyio.sleep(0.4)

    again = await claim_one(store)
    assert (again.key, again.attempt) == ("k1", 1)
