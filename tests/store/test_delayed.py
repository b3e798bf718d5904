"""Delayed jobs: `DispatchRequest.run_at` holds a job back until then, by the store's
clock (the tests' store runs on this host, so time.time() is close to it)."""

from __future__ import annotations

import time

import anyio
import pytest

from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest
from tests.store.support import HANDLER, claim, claim_one, new_job

pytestmark = pytest.mark.anyio

DELAY = 3.0


def delayed(key: str, run_at: float, *, schedule: str | None = None) -> DispatchRequest:
    return DispatchRequest(key=key, handler=HANDLER, payload=b"{}", max_attempts=3,
                           run_at=run_at, schedule=schedule)


async def test_a_delayed_job_is_not_claimed_before_run_at_and_is_once_due(store: Store) -> None:
    run_at = time.time() + DELAY
    await store.dispatch(delayed("later", run_at))

    early = await claim(store)
    claimed_at = time.time()

    # On a loaded machine the claim itself may come after run_at; it proves nothing then.
    if claimed_at < run_at - 0.2:
        assert early.jobs == ()
        assert early.next_due_in is not None
        assert 0 < early.next_due_in <= DELAY + 0.1
        await anyio.sleep(max(0.0, run_at - time.time()) + 0.1)
        early = await claim(store)
    (job,) = early.jobs
    assert job.key == "later"


async def test_next_due_in_is_the_nearest_of_several_delayed_jobs(store: Store) -> None:
    now = time.time()
    await store.dispatch(delayed("far", now + 600))
    await store.dispatch(delayed("near", now + 30))

    batch = await claim(store)

    assert batch.jobs == ()
    assert batch.next_due_in == pytest.approx(30, abs=1)


async def test_a_delayed_job_of_another_handler_does_not_shorten_the_wait(store: Store) -> None:
    await store.dispatch(DispatchRequest(key="other", handler="other", payload=b"{}",
                                         max_attempts=1, run_at=time.time() + 5))

    assert (await claim(store)).next_due_in is None


async def test_a_past_run_at_is_claimed_at_once_and_shown(store: Store) -> None:
    run_at = time.time() - 3600
    await store.dispatch(delayed("past", run_at))

    job = await claim_one(store)

    assert job.key == "past"
    record = await store.job("past")
    assert record.run_at == pytest.approx(run_at, abs=0.001)
    assert record.to_json()["run_at"] == record.run_at


async def test_a_delayed_job_waits_behind_due_ones_without_blocking_them(store: Store) -> None:
    await store.dispatch(delayed("later", time.time() + 60))
    await store.dispatch(new_job("now"))

    batch = await claim(store, 5)

    assert [job.key for job in batch.jobs] == ["now"]
    assert batch.next_due_in == pytest.approx(60, abs=1)


async def test_record_shows_run_at_and_schedule_and_keeps_them_once_started(
    store: Store,
) -> None:
    run_at = time.time() + 0.3
    await store.dispatch(delayed("k1", run_at, schedule="nightly"))

    record = await store.job("k1")
    assert (record.state, record.schedule) == ("pending", "nightly")
    assert record.run_at == pytest.approx(run_at, abs=0.001)
    assert record.to_json()["run_at"] == record.run_at
    assert record.to_json()["schedule"] == "nightly"

    await anyio.sleep(0.5)
    await claim_one(store)
    started = await store.job("k1")
    assert (started.state, started.schedule) == ("running", "nightly")
    assert started.run_at == record.run_at


async def test_a_job_without_run_at_shows_none(store: Store) -> None:
    await store.dispatch(new_job("k1"))

    record = await store.job("k1")

    assert (record.run_at, record.schedule) == (None, None)
    assert {"run_at": None, "schedule": None}.items() <= record.to_json().items()


async def test_stop_of_a_delayed_job_ends_it_stopped_at_once(store: Store) -> None:
    await store.dispatch(delayed("later", time.time() + 60))

    assert await store.stop("later") == "stopped"

    assert (await store.job("later")).state == "stopped"
    assert (await claim(store)).next_due_in is None


async def test_a_notification_to_a_delayed_job_is_kept_until_it_runs(store: Store) -> None:
    run_at = time.time() + 0.3
    await store.dispatch(delayed("later", run_at))
    await store.notify("later", b'{"hello": 1}')

    await anyio.sleep(0.5)
    job = await claim_one(store)

    assert job.has_notes
    assert [note.payload for note in await store.take_notifications(job.lease)] == [
        b'{"hello": 1}']


async def test_a_redispatch_without_run_at_drops_the_old_one(store: Store) -> None:
    await store.dispatch(delayed("k1", time.time() + 60, schedule="s"))
    await store.stop("k1")

    await store.dispatch(new_job("k1"))

    record = await store.job("k1")
    assert (record.run_at, record.schedule) == (None, None)
    assert [job.key for job in (await claim(store)).jobs] == ["k1"]
