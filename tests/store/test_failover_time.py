"""`ClaimedJob.lease_expired_at`: the deadline of the lease whose expiry put the job
back to pending, for the failover-time metric; None for every other claim."""

from __future__ import annotations

import pytest

from supervisor.store.base import Store
from tests.store.support import (
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim_as_supervisors_do,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def test_a_job_recovered_and_claimed_in_one_call_carries_the_expired_deadline(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    lost = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()

    again = await claim_one(store, owner="sup-b")
    now = (await store.members()).store_time

    assert again.lease_expired_at == pytest.approx(lost.lease_deadline, abs=0.01)
    started = again.lease_deadline - LONG_TTL
    # Started after the lease ran out, by the claim just made (on a loaded machine that
    # may be seconds later: the claims wait for a witness of the gap, claim_one).
    assert lost.lease_deadline < started <= now


async def test_a_job_recovered_by_one_claim_keeps_the_deadline_until_another_claims_it(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    lost = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    assert (await claim_as_supervisors_do(store, 0)).recovered == 1

    again = await claim_one(store, owner="sup-b")

    assert again.lease_expired_at == pytest.approx(lost.lease_deadline, abs=0.01)


async def test_each_recovery_carries_the_deadline_of_the_lease_that_expired(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    second = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()

    third = await claim_one(store)

    assert third.lease_expired_at == pytest.approx(second.lease_deadline, abs=0.01)


async def test_a_fresh_job_has_no_expired_lease(store: Store) -> None:
    await store.dispatch(new_job("k1"))

    assert (await claim_one(store)).lease_expired_at is None


async def test_a_retried_job_has_no_expired_lease(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    first = await claim_one(store)
    await store.fail(first.lease, "boom", final=False, retry_delay=0.0)

    assert (await claim_one(store)).lease_expired_at is None


async def test_a_released_or_moved_job_has_no_expired_lease(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    first = await claim_one(store)
    await store.release(first.lease)
    assert (await claim_one(store)).lease_expired_at is None

    await store.dispatch(new_job("k2"))
    other = await claim_one(store)
    await store.release(other.lease, reserve_for="sup-b", reserve_ttl=LONG_TTL)
    assert (await claim_one(store, owner="sup-b")).lease_expired_at is None


async def test_the_claim_clears_the_expired_deadline(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    recovered = await claim_one(store)
    assert recovered.lease_expired_at is not None
    await store.release(recovered.lease)

    assert (await claim_one(store)).lease_expired_at is None


async def test_a_key_dispatched_again_starts_without_an_expired_lease(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    assert (await claim_as_supervisors_do(store, 0)).recovered == 1
    await store.stop("k1")  # pending after the recovery: stopped at once

    await store.dispatch(new_job("k1"))

    job = await claim_one(store, owner=OWNER)
    assert job.lease_expired_at is None
