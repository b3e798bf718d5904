"""Moves: a job released with a reservation for one supervisor, claimed by it first;
and what a planner reads to plan moves (`members`, `snapshot().moving`)."""

from __future__ import annotations

import pytest

from supervisor.errors import StaleToken
from supervisor.store.base import Store
from supervisor.store.records import ClaimedJob, Lease
from tests.store.support import (
    HANDLER,
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_one,
    dispatch_all,
    new_job,
    supervisor,
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
    await store.register(supervisor(TARGET))
    await store.dispatch(new_job("mover"))
    await move(store, "mover")

    assert await store.stop("mover") == "stopped"

    record = await store.job("mover")
    assert record.state == "stopped"
    assert (record.reserved_for, record.reserved_until, record.moved_from) == (None, None, None)
    assert [m.inbound for m in (await store.members()).members] == [0]
    assert (await store.snapshot()).moving == ()
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
    assert (await store.snapshot()).moving == ()


async def test_members_show_each_members_load_per_handler_and_its_inbound_moves(
    store: Store,
) -> None:
    a = supervisor(OWNER, handlers=("h1", "h2"), rebalance=("h1",))
    b = supervisor(TARGET, handlers=("h1",), rebalance=("h1",))
    await store.register(a)
    await store.register(b)
    await store.dispatch(new_job("a1", handler="h1"))
    await store.dispatch(new_job("a2", handler="h1"))
    await store.dispatch(new_job("a3", handler="h2"))
    await store.dispatch(new_job("a4", handler="h1"))
    held = {job.key: job.lease
            for job in (await claim(store, 4, owner=OWNER, handlers=["h1", "h2"])).jobs}
    await store.release(held["a1"], reserve_for=TARGET, reserve_ttl=LONG_TTL)
    await store.release(held["a4"], reserve_for=TARGET, reserve_ttl=SHORT_TTL)
    await wait_for_expiry(SHORT_TTL)  # a4's reservation has run out: not inbound

    membership = await store.members()

    assert [m.info for m in membership.members] == [a, b]
    assert [type(m.info.handlers) for m in membership.members] == [tuple, tuple]
    loads = [(m.info.id, m.running, m.running_by_handler, m.inbound)
             for m in membership.members]
    assert loads == [(OWNER, 2, {"h1": 1, "h2": 1}, 0), (TARGET, 0, {}, 1)]
    snapshot = await store.snapshot()
    assert [(s.info, s.running, s.running_by_handler, s.inbound)
            for s in snapshot.supervisors] == [(m.info, m.running, m.running_by_handler,
                                                m.inbound) for m in membership.members]
    assert membership.store_time == pytest.approx(snapshot.store_time, abs=1)


async def test_members_leave_out_supervisors_silent_for_three_ttls(store: Store) -> None:
    await store.register(supervisor("sup-old", lease_ttl=0.2))
    await store.register(supervisor("sup-new"))
    await wait_for_expiry(0.4)

    assert [m.info.id for m in (await store.members()).members] == ["sup-new"]


async def test_snapshot_lists_moving_jobs_until_claimed_or_run_out(store: Store) -> None:
    await dispatch_all(store, ["m1", "m2", "still"])
    await move(store, "m1", to=TARGET, ttl=LONG_TTL)
    await move(store, "m2", to=BYSTANDER, ttl=SHORT_TTL)

    moving = (await store.snapshot()).moving
    assert sorted((r.key, r.state, r.reserved_for, r.moved_from) for r in moving) == [
        ("m1", "pending", TARGET, OWNER), ("m2", "pending", BYSTANDER, OWNER),
    ]

    await claim_one(store, owner=TARGET)
    assert [r.key for r in (await store.snapshot()).moving] == ["m2"]

    await wait_for_expiry(SHORT_TTL)
    assert (await store.snapshot()).moving == ()
    record = await store.job("m2")
    assert (record.state, record.reserved_for) == ("pending", BYSTANDER)
