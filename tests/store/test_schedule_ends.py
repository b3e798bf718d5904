"""A schedule that ends itself (a plan's "end_schedule", `sandbox.EndSchedule`): recorded
with its tick's outcome while that tick is current; no tick of the same definition fires
after it, and a changed definition (fingerprint) starts the schedule again."""

from __future__ import annotations

import pytest

from supervisor.store.base import Store
from supervisor.store.records import FiredTick
from tests.store.conftest import Connect
from tests.store.test_schedule_ticks import TICK, record_of, tick_request

pytestmark = pytest.mark.anyio

FIRED = FiredTick(schedule="nightly", tick=TICK, owner="sup-a")


async def end_at_first_tick(store: Store) -> None:
    assert (await store.fire_tick(tick_request())).outcome == "fired"
    assert await store.record_tick_outcome(FIRED, "applied", b'{"started": 0}', end=True)


async def test_an_end_is_recorded_with_the_outcome_of_its_tick(store: Store) -> None:
    await end_at_first_tick(store)

    record = await record_of(store, "nightly")
    book = await store.schedules()

    assert (record.outcome, record.detail) == ("applied", {"started": 0})
    assert record.ended_tick == TICK
    assert record.ended_at is not None
    assert book.store_time - 5 <= record.ended_at <= book.store_time


async def test_no_later_tick_of_the_same_definition_fires_anywhere(connect: Connect) -> None:
    first, second = await connect(), await connect()
    await end_at_first_tick(first)
    before = await record_of(second, "nightly")

    for store, owner in ((first, "sup-a"), (second, "sup-b")):
        result = await store.fire_tick(tick_request(TICK + 60, owner=owner, key="job-1"))
        assert result.outcome == "ended"
    result = await second.fire_tick(tick_request(TICK + 120, owner="sup-b"))

    assert result.outcome == "ended"
    assert await record_of(second, "nightly") == before
    assert await second.live_among(["job-1"]) == set()


async def test_a_changed_definition_starts_the_schedule_again(store: Store) -> None:
    await end_at_first_tick(store)

    result = await store.fire_tick(tick_request(TICK + 60, key="job-2", fingerprint="fp-2"))

    assert result.outcome == "dispatched"
    record = await record_of(store, "nightly")
    assert (record.ended_at, record.ended_tick) == (None, None)
    assert (record.last_tick, record.fingerprint, record.fires) == (TICK + 60, "fp-2", 2)
    assert (await store.fire_tick(tick_request(TICK + 120, fingerprint="fp-2"))).outcome \
        == "fired"


async def test_an_end_of_a_tick_no_longer_current_changes_nothing(store: Store) -> None:
    assert (await store.fire_tick(tick_request())).outcome == "fired"
    assert (await store.fire_tick(tick_request(TICK + 60, owner="sup-b"))).outcome == "fired"

    recorded = await store.record_tick_outcome(FIRED, "applied", b"{}", end=True)

    assert recorded is False
    record = await record_of(store, "nightly")
    assert (record.ended_at, record.ended_tick, record.outcome) == (None, None, "fired")


async def test_an_outcome_without_end_leaves_the_schedule_running(store: Store) -> None:
    assert (await store.fire_tick(tick_request())).outcome == "fired"
    assert await store.record_tick_outcome(FIRED, "applied", b"{}")

    record = await record_of(store, "nightly")

    assert (record.ended_at, record.ended_tick) == (None, None)
    assert (await store.fire_tick(tick_request(TICK + 60))).outcome == "fired"
