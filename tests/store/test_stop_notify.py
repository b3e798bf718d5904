"""Stopping jobs and notifying them."""

from __future__ import annotations

import pytest

from supervisor.errors import JobNotFound, StaleToken
from supervisor.store.base import Store
from supervisor.store.records import Lease
from tests.store.support import (
    LONG_TTL,
    OWNER,
    SHORT_TTL,
    claim,
    claim_as_supervisors_do,
    claim_one,
    new_job,
    wait_for_expiry,
)

pytestmark = pytest.mark.anyio


async def test_stop_of_a_pending_job_ends_it_at_once(store: Store) -> None:
    await store.dispatch(new_job("k1"))

    assert await store.stop("k1") == "stopped"

    record = await store.job("k1")
    assert (record.state, record.attempts) == ("stopped", 0)
    assert record.finished_at is not None
    assert (await claim(store)).jobs == ()


async def test_stop_of_a_running_job_is_reported_to_its_owner(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)

    assert await store.stop("k1") == "running"

    assert (await store.job("k1")).stop_requested
    renewal = await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {})
    assert renewal.stop_requested == {"k1"}
    assert not renewal.lost
    await store.finish_stopped(job.lease, "stopped by request")
    record = await store.job("k1")
    assert (record.state, record.finished_at is not None) == ("stopped", True)
    with pytest.raises(StaleToken):
        await store.finish_stopped(job.lease, "twice")


async def test_stop_of_a_finished_job_leaves_it(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b"1")

    assert await store.stop("k1") == "succeeded"
    assert (await store.job("k1")).state == "succeeded"


@pytest.mark.parametrize("hand_back", ["release", "fail"])
async def test_a_stop_requested_job_handed_back_ends_stopped(store: Store, hand_back: str) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.stop("k1")

    if hand_back == "release":
        await store.release(job.lease)
    else:
        assert await store.fail(job.lease, "boom", final=False, retry_delay=0) == "stopped"

    assert (await store.job("k1")).state == "stopped"
    assert (await claim(store)).jobs == ()


async def test_stop_then_lease_expiry_ends_the_job_stopped(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await claim_one(store, lease_ttl=SHORT_TTL)
    assert await store.stop("k1") == "running"
    await wait_for_expiry()

    batch = await claim_as_supervisors_do(store)

    assert (batch.recovered, batch.jobs) == (1, ())
    assert (await store.job("k1")).state == "stopped"


async def test_notifications_wait_until_the_job_takes_them(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    await store.notify("k1", b'{"n": 1}')
    await store.notify("k1", b'{"n": 2}')
    job = await claim_one(store)
    assert job.has_notes

    renewal = await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {})
    assert renewal.notified == {"k1"}
    notes = await store.take_notifications(job.lease)
    assert [note.payload for note in notes] == [b'{"n": 1}', b'{"n": 2}']
    assert notes[0].seq < notes[1].seq
    assert await store.take_notifications(job.lease) == notes
    assert await store.take_notifications(job.lease, after=notes[0].seq) == notes[1:]

    await store.ack_notifications(job.lease, notes[1].seq)
    assert await store.take_notifications(job.lease) == []
    assert (await store.renew(OWNER, "i-1", [job.lease], LONG_TTL, {})).notified == set()


async def test_acknowledged_notifications_go_and_later_ones_stay(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    for n in range(3):
        await store.notify("k1", b'{"n": %d}' % n)
    first, second, third = await store.take_notifications(job.lease)

    await store.ack_notifications(job.lease, first.seq)
    assert await store.take_notifications(job.lease) == [second, third]
    await store.notify("k1", b'{"n": 3}')
    (*_, fourth) = await store.take_notifications(job.lease)
    assert fourth.seq > third.seq
    await store.ack_notifications(job.lease, third.seq)
    assert await store.take_notifications(job.lease) == [fourth]


async def test_unacknowledged_notifications_survive_a_release_in_order(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    for n in range(3):
        await store.notify("k1", b'{"n": %d}' % n)
    first, second, third = await store.take_notifications(job.lease)
    await store.ack_notifications(job.lease, first.seq)

    await store.release(job.lease)
    again = await claim_one(store, owner="sup-b")

    assert again.has_notes
    assert await store.take_notifications(again.lease) == [second, third]
    await store.notify("k1", b'{"n": 3}')
    notes = await store.take_notifications(again.lease)
    assert [note.payload for note in notes] == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']
    assert notes[2].seq > third.seq


async def test_a_stale_lease_neither_takes_nor_acknowledges(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    assert not job.has_notes
    await store.notify("k1", b'{"n": 1}')
    stale = Lease("k1", job.token + 1, OWNER)

    assert await store.take_notifications(stale) == []
    await store.ack_notifications(stale, 1_000_000)
    (note,) = await store.take_notifications(job.lease)
    assert note.payload == b'{"n": 1}'


async def test_a_finished_job_drops_its_notifications(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.notify("k1", b'{"old": 1}')
    await store.complete(job.lease, b"1")

    await store.dispatch(new_job("k1"))
    again = await claim_one(store)
    assert not again.has_notes
    await store.notify("k1", b'{"new": 1}')
    assert [n.payload for n in await store.take_notifications(again.lease)] == [b'{"new": 1}']


async def test_notify_of_a_finished_job_raises_job_not_found(store: Store) -> None:
    await store.dispatch(new_job("k1"))
    job = await claim_one(store)
    await store.complete(job.lease, b"1")

    with pytest.raises(JobNotFound, match=r"job 'k1' has finished \(succeeded\)"):
        await store.notify("k1", b"{}")
    with pytest.raises(JobNotFound, match=r"no .*job has the key 'ghost'"):
        await store.notify("ghost", b"{}")
