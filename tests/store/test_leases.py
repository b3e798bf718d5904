"""Renewal, and recovery of expired leases."""

from __future__ import annotations

import anyio
import pytest

from supervisor.store.base import Store
from supervisor.store.records import JobStats, Lease
from tests.store.support import (
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    dispatch_all,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def test_renew_extends_the_lease_and_stores_stats(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, lease_ttl=5.0)
    stats = JobStats(pid=4321, rss_bytes=21_000_000, cpu_percent=99.5)

    result = await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {"k1": stats})

    assert result.lost | result.stop_requested | result.notified == frozenset()
    record = await store.job("k1")
    assert record.lease_deadline is not None
    assert record.lease_deadline == pytest.approx(result.store_time + LONG_TTL, abs=0.01)
    assert record.lease_deadline > job.lease_deadline
    assert record.stats == stats


async def test_renew_without_stats_keeps_the_last_ones(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {"k1": JobStats(pid=7)})

    await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {})

    assert (await store.job("k1")).stats.pid == 7


async def test_renew_reports_leases_it_does_not_hold(store: Store) -> None:
    await dispatch_all(store, ["a", "b"])
    a, b = (await claim(store, 2)).jobs
    await store.complete(b.lease, b"null")
    before = await store.job("a")

    wrong_token = Lease("a", a.token + 1000, OWNER)
    stale = [wrong_token, b.lease, Lease("gone", 1, OWNER)]
    result = await store.renew(OWNER, "i-1", stale, 60, {})
    assert result.lost == {("a", a.token + 1000), ("b", b.token), ("gone", 1)}

    other_owner = await store.renew("sup-b", "i-1", [Lease("a", a.token, "sup-b")], 60, {})
    assert other_owner.lost == {("a", a.token)}
    assert await store.job("a") == before


async def test_expired_lease_goes_back_to_pending_without_spending_an_attempt(
    store: Store,
) -> None:
    await store.dispatch(new_job("k1"))
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()

    batch = await claim_as_supervisors_do(store, 0)

    assert batch.recovered == 1
    record = await store.job("k1")
    assert (record.state, record.attempts, record.lease_losses) == ("pending", 0, 1)
    assert (await store.renew(OWNER, "i-1", [old.lease], LONG_TTL, {})).lost == {
        ("k1", old.token)}
    again = await claim_one(store, owner="sup-b")
    assert (again.attempt, again.owner) == (1, "sup-b")
    assert again.token > old.token


async def test_a_claim_told_not_to_recover_leaves_expired_leases_to_one_that_does(
    store: Store,
) -> None:
    await dispatch_all(store, ["k1", "k2"])
    await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()

    batch = await store.claim(OWNER, ["thumbnail"], 1, LONG_TTL, 3, recover=False)

    assert (batch.recovered, [job.key for job in batch.jobs]) == (0, ["k2"])
    assert (await store.job("k1")).state == "running"
    assert (await claim_as_supervisors_do(store, 0)).recovered == 1


async def test_renew_reports_a_lost_lease_by_its_token_not_its_key(store: Store) -> None:
    # An old run of k1 (its lease recovered) and the new run of k1 meet on one
    # supervisor: only the old token is lost, the new one is renewed.
    await store.dispatch(new_job("k1"))
    old = await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    new = await claim_one(store)
    assert (new.key, new.owner) == (old.key, old.owner) and new.token > old.token

    result = await store.renew(OWNER, "i-1", [old.lease, new.lease], LONG_TTL, {})

    assert result.lost == {("k1", old.token)}
    assert (await store.job("k1")).state == "running"


async def test_recovered_job_is_claimed_before_newer_jobs(store: Store) -> None:
    await store.dispatch(new_job("old"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    await dispatch_all(store, ["new-1", "new-2"])
    await wait_for_expiry()

    # Recovered by claims with no room, as supervisors claim: a claim with room that came
    # MIN_CLAIM_GAP after the last one (a loaded machine) would leave "old" to a later
    # claim and start the newer jobs meanwhile.
    assert (await claim_as_supervisors_do(store, 0)).recovered == 1
    batch = await claim(store, 3)

    assert [job.key for job in batch.jobs] == ["old", "new-1", "new-2"]


async def test_renewed_lease_is_not_recovered(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store, lease_ttl=SHORT_TTL)
    await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {})
    await wait_for_expiry()

    assert (await claim(store, 0)).recovered == 0
    assert (await store.job("k1")).state == "running"


async def test_lease_lost_too_often_fails_the_job(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=2)
    await wait_for_expiry()
    assert (await claim_as_supervisors_do(store, 0, max_lease_losses=2)).recovered == 1
    await claim_one(store, lease_ttl=SHORT_TTL, max_lease_losses=2)
    await wait_for_expiry()

    batch = await claim_as_supervisors_do(store, 1, max_lease_losses=2)

    assert (batch.recovered, batch.jobs) == (1, ())
    record = await store.job("k1")
    assert (record.state, record.lease_losses) == ("failed", 2)
    assert record.error is not None and "lease" in record.error
    assert record.finished_at is not None


async def test_lease_losses_count_only_losses_in_a_row(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    await wait_for_expiry()
    await claim_as_supervisors_do(store, 0)
    assert (await store.job("k1")).lease_losses == 1
    job = await claim_one(store, lease_ttl=0.3)

    await store.renew(OWNER, "i-1", [job.lease], 0.3, {})
    assert (await store.job("k1")).lease_losses == 1  # held for less than 3 ttls
    for _ in range(6):
        await anyio.sleep(0.17)
        assert not (await store.renew(OWNER, "i-1", [job.lease], 0.3, {})).lost

    assert (await store.job("k1")).lease_losses == 0
