"""Moves: a job released with a reservation for one supervisor, claimed by it first."""

from __future__ import annotations

import pytest

from supervisor.errors import StaleToken
from supervisor.store.base import ClaimedJob, Lease, Store
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_one,
    dispatch_all,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio

TARGET = "sup-b"
BYSTANDER = "sup-c"


async def move(
    store: Store, key: str, *, to: str = TARGET, ttl: float = LONG_TTL,
    handlers: tuple[str, ...] = (HANDLER,),
) -> ClaimedJob:
    """Claim `key` as OWNER (it must be the oldest due job of `handlers`) and release it
    for `to`; the claimed job."""
    (job,) = (await claim(store, 1, handlers=handlers)).jobs
    assert job.key == key
    await store.release(job.lease, reserve_for=to, reserve_ttl=ttl)
    return job


async def test_a_moved_job_is_held_for_its_target_and_shows_the_move(store: Store) -> None:
    await store.dispatch(new_job("mover"))
    first = await move(store, "mover")

    record = await store.job("mover")
    now = (await store.snapshot()).store_time

    assert (record.state, record.attempts, record.supervisor) == ("pending", 0, OWNER)
    assert (record.reserved_for, record.moved_from) == (TARGET, OWNER)
    assert record.reserved_until is not None
    assert record.reserved_until - now == pytest.approx(LONG_TTL, abs=1)
    assert first.attempt == 1


async def test_another_supervisor_does_not_claim_a_moved_job_and_looks_again_later(
    store: Store,
) -> None:
    await store.dispatch(new_job("mover"))
    await move(store, "mover")
    await store.dispatch(new_job("free"))

    batch = await claim(store, 5, owner=BYSTANDER)

    assert [job.key for job in batch.jobs] == ["free"]
    assert batch.next_due_in is not None
    assert batch.next_due_in == pytest.approx(LONG_TTL, abs=1)
    assert (await store.job("mover")).state == "pending"


async def test_the_target_claims_a_moved_job_at_once_without_spending_an_attempt(
    store: Store,
) -> None:
    await store.dispatch(new_job("mover"))
    first = await move(store, "mover")

    again = await claim_one(store, owner=TARGET)

    assert (again.key, again.owner, again.attempt) == ("mover", TARGET, first.attempt)
    assert again.token > first.token
    record = await store.job("mover")
    assert (record.state, record.supervisor, record.attempts) == ("running", TARGET, 1)
    assert (record.reserved_for, record.reserved_until, record.moved_from) == (None, None, None)


async def test_the_target_claims_its_moved_jobs_ahead_of_older_pending_jobs(
    store: Store,
) -> None:
    await dispatch_all(store, ["older-1", "older-2"])
    await store.dispatch(new_job("mover", handler="other"))
    await move(store, "mover", handlers=("other",))

    batch = await claim(store, 2, owner=TARGET, handlers=[HANDLER, "other"])

    assert [job.key for job in batch.jobs] == ["mover", "older-1"]


async def test_once_the_reservation_runs_out_any_supervisor_claims_the_job(
    store: Store,
) -> None:
    await store.dispatch(new_job("mover"))
    first = await move(store, "mover", ttl=SHORT_TTL)
    assert (await claim(store, 1, owner=BYSTANDER)).jobs == ()

    await wait_for_expiry(SHORT_TTL)
    again = await claim_one(store, owner=BYSTANDER)

    assert (again.key, again.attempt) == ("mover", first.attempt)
    record = await store.job("mover")
    assert (record.supervisor, record.reserved_for, record.moved_from) == (BYSTANDER, None, None)


async def test_a_move_for_a_supervisor_that_does_not_run_the_handler_is_not_claimed_by_it(
    store: Store,
) -> None:
    await store.dispatch(new_job("mover"))
    await move(store, "mover")

    batch = await claim(store, 5, owner=TARGET, handlers=["other"])

    assert (batch.jobs, batch.next_due_in) == ((), None)
    assert (await store.job("mover")).reserved_for == TARGET
    assert [job.key for job in (await claim(store, 5, owner=TARGET)).jobs] == ["mover"]


async def test_stop_of_a_moved_job_stops_it_and_leaves_nothing_reserved(store: Store) -> None:
    await store.dispatch(new_job("mover"))
    await move(store, "mover")

    assert await store.stop("mover") == "stopped"

    record = await store.job("mover")
    assert record.state == "stopped"
    assert (record.reserved_for, record.reserved_until, record.moved_from) == (None, None, None)
    assert (await claim(store, 5, owner=TARGET)).jobs == ()


async def test_notes_queued_before_and_during_a_move_reach_the_targets_run(
    store: Store,
) -> None:
    await store.dispatch(new_job("mover"))
    await store.notify("mover", b'"before"')
    await move(store, "mover")
    await store.notify("mover", b'"during"')

    again = await claim_one(store, owner=TARGET)

    assert again.has_notes
    notes = await store.take_notifications(again.lease)
    assert [note.payload for note in notes] == [b'"before"', b'"during"']


async def test_a_stale_lease_cannot_move_the_job(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    old = await claim_one(store)
    await store.release(old.lease)
    current = await claim_one(store)

    with pytest.raises(StaleToken):
        await store.release(old.lease, reserve_for=TARGET, reserve_ttl=LONG_TTL)
    with pytest.raises(StaleToken):
        await store.release(Lease("k1", current.token, BYSTANDER), reserve_for=TARGET,
                            reserve_ttl=LONG_TTL)

    record = await store.job("k1")
    assert (record.state, record.supervisor, record.token) == ("running", OWNER, current.token)
    assert (record.reserved_for, record.reserved_until, record.moved_from) == (None, None, None)
    assert (await claim(store, 5, owner=TARGET)).jobs == ()


async def test_a_move_of_a_job_asked_to_stop_ends_it_stopped(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    assert await store.stop("k1") == "running"

    await store.release(job.lease, reserve_for=TARGET, reserve_ttl=LONG_TTL)

    record = await store.job("k1")
    assert record.state == "stopped"
    assert (record.reserved_for, record.reserved_until, record.moved_from) == (None, None, None)
    assert (await claim(store, 5, owner=TARGET)).jobs == ()
