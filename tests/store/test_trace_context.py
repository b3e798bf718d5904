"""The dispatching caller's W3C trace context (docs/tracing.md): kept with the job by its
dispatch and handed back with every claim of it, on every store."""

from __future__ import annotations

import dataclasses

import pytest

from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest
from tests.store.support import (
    claim,
    claim_as_supervisors_do,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
STATE = "vendor=opaque,other=t61rcWkgMzE"


def traced(key: str, traceparent: str = PARENT, tracestate: str | None = STATE
           ) -> DispatchRequest:
    return dataclasses.replace(new_job(key), traceparent=traceparent, tracestate=tracestate)


async def test_a_claim_hands_back_the_trace_context_its_dispatch_kept(store: Store) -> None:
    await store.dispatch(traced("k1"))

    job = await claim_one(store)

    assert (job.traceparent, job.tracestate) == (PARENT, STATE)


async def test_the_jobs_record_shows_its_traceparent(store: Store) -> None:
    await store.dispatch(traced("k1"))
    await store.dispatch(new_job("plain"))

    assert (await store.job("k1")).to_json()["traceparent"] == PARENT
    assert (await store.job("plain")).traceparent is None
    assert [record.traceparent for record in await store.jobs("pending")] == [PARENT, None]


async def test_a_job_dispatched_without_one_is_claimed_without_one(store: Store) -> None:
    await store.dispatch(new_job("plain"))

    job = await claim_one(store)

    assert (job.traceparent, job.tracestate) == (None, None)


async def test_dispatch_many_keeps_each_jobs_own_trace_context(store: Store) -> None:
    other = "00-11111111111111111111111111111111-2222222222222222-00"
    await store.dispatch_many([traced("a"), traced("b", other, None), new_job("c")])

    jobs = {job.key: job for job in (await claim(store, 3)).jobs}

    assert {key: (job.traceparent, job.tracestate) for key, job in jobs.items()} == {
        "a": (PARENT, STATE), "b": (other, None), "c": (None, None)}


async def test_every_attempt_gets_it_after_a_retry_a_release_and_an_expired_lease(
    store: Store,
) -> None:
    await store.dispatch(traced("k1"))
    first = await claim_one(store)
    await store.fail(first.lease, "boom", final=False, retry_delay=0)
    second = await claim_one(store)
    await store.release(second.lease)
    third = await claim_one(store, lease_ttl=0.5)
    await wait_for_expiry()
    # A claim more than a second after the last one (a loaded machine) leaves the lease
    # that ended in the gap to a later claim, as a supervisor's next poll would find it.
    batch = await claim_as_supervisors_do(store)
    fourth = batch.jobs[0] if batch.jobs else await claim_one(store)

    assert len({first.token, second.token, third.token, fourth.token}) == 4
    assert [(job.traceparent, job.tracestate) for job in (first, second, third, fourth)] == [
        (PARENT, STATE)] * 4


async def test_a_new_dispatch_of_the_key_does_not_inherit_the_old_context(store: Store) -> None:
    await store.dispatch(traced("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b"1")

    await store.dispatch(new_job("k1"))

    assert (await claim_one(store)).traceparent is None


async def test_a_retried_job_keeps_the_context_of_its_dispatch(store: Store) -> None:
    await store.dispatch(traced("k1"))
    job = await claim_one(store)
    await store.fail(job.lease, "bad input", final=True, retry_delay=0)

    await store.retry("k1")

    again = await claim_one(store)
    assert (again.attempt, again.traceparent, again.tracestate) == (1, PARENT, STATE)
