"""Schedule ticks: each tick fires once in the whole pool, decided by the store."""

from __future__ import annotations

import time

import anyio
import pytest

from supervisor.errors import StaleTick
from supervisor.store.base import Store
from supervisor.store.records import (
    FIRING_OUTCOMES,
    RELEASED,
    UNCHECKED,
    DispatchRequest,
    FiredTick,
    ScheduleRecord,
    TickRequest,
    TickResult,
    Unchecked,
)
from tests.store.conftest import Connect
from tests.store.support import HANDLER, claim, claim_one, new_job

pytestmark = pytest.mark.anyio

TICK = 1_700_000_000.0  # long past: every not_before at it is due


def tick_request(
    tick: float = TICK,
    *,
    schedule: str = "nightly",
    owner: str = "sup-a",
    key: str | None = None,
    not_before: float | None = None,
    missed: int = 0,
    fingerprint: str = "fp-1",
    basis: float | Unchecked | None = UNCHECKED,
) -> TickRequest:
    dispatch = None
    if key is not None:
        dispatch = DispatchRequest(key=key, handler=HANDLER, payload=b'{"t": 1}',
                                   max_attempts=1, schedule=schedule)
    return TickRequest(schedule=schedule, tick=tick,
                       not_before=tick if not_before is None else not_before,
                       fingerprint=fingerprint, owner=owner, missed=missed,
                       dispatch=dispatch, basis=basis)


async def record_of(store: Store, name: str) -> ScheduleRecord:
    (record,) = [r for r in (await store.schedules()).schedules if r.name == name]
    return record


async def test_one_of_many_concurrent_callers_fires_a_tick(connect: Connect) -> None:
    stores: list[Store] = [await connect() for _ in range(4)]
    results: list[TickResult] = []

    async def fire(index: int) -> None:
        store = stores[index % len(stores)]
        results.append(await store.fire_tick(tick_request(owner=f"sup-{index}", key="reindex")))

    async with anyio.create_task_group() as group:
        for index in range(10):
            group.start_soon(fire, index)

    outcomes = sorted(result.outcome for result in results)
    assert outcomes == ["dispatched"] + ["taken"] * 9
    assert len([r for r in results if r.outcome in FIRING_OUTCOMES]) == 1
    assert all(result.last_tick == TICK for result in results)
    record = await record_of(stores[0], "nightly")
    assert (record.fires, record.last_tick, record.outcome) == (1, TICK, "dispatched")
    assert len(await stores[0].jobs()) == 1


async def test_a_tick_fires_and_is_recorded(store: Store) -> None:
    before = time.time()
    result = await store.fire_tick(tick_request(owner="sup-b", key="reindex",
                                                fingerprint="abc"))

    assert (result.outcome, result.last_tick) == ("dispatched", TICK)
    assert abs(result.store_time - before) < 5
    record = await record_of(store, "nightly")
    assert (record.last_tick, record.fingerprint, record.fired_by) == (TICK, "abc", "sup-b")
    assert record.fired_at is not None and abs(record.fired_at - before) < 5
    assert (record.outcome, record.detail) == ("dispatched", "reindex")
    assert (record.fires, record.skipped, record.missed) == (1, 0, 0)
    job = await store.job("reindex")
    assert (job.state, job.handler, job.payload, job.schedule) == (
        "pending", HANDLER, {"t": 1}, "nightly")


async def test_early_before_not_before_changes_nothing(store: Store) -> None:
    now = time.time()
    result = await store.fire_tick(tick_request(now, not_before=now + 60, key="reindex"))

    assert result.outcome == "early"
    assert result.last_tick is None
    assert result.store_time < now + 60
    assert (await store.schedules()).schedules == ()
    assert await store.jobs() == []


async def test_an_equal_or_older_tick_is_taken(store: Store) -> None:
    assert (await store.fire_tick(tick_request(TICK + 60))).outcome == "fired"

    for tick in (TICK + 60, TICK):
        result = await store.fire_tick(tick_request(tick, owner="sup-b", key="late"))
        assert (result.outcome, result.last_tick) == ("taken", TICK + 60)

    record = await record_of(store, "nightly")
    assert (record.fires, record.fired_by, record.outcome) == (1, "sup-a", "fired")
    assert await store.jobs() == []


async def test_a_producer_tick_fires_without_a_job(store: Store) -> None:
    result = await store.fire_tick(tick_request())

    assert (result.outcome, result.last_tick) == ("fired", TICK)
    record = await record_of(store, "nightly")
    assert (record.outcome, record.detail, record.fires) == ("fired", None, 1)
    assert await store.jobs() == []


async def test_a_fixed_key_still_live_is_skipped_and_counted(store: Store) -> None:
    assert (await store.fire_tick(tick_request(TICK, key="reindex"))).outcome == "dispatched"
    running = await claim_one(store)

    result = await store.fire_tick(tick_request(TICK + 60, key="reindex"))

    assert (result.outcome, result.last_tick) == ("skipped", TICK + 60)
    record = await record_of(store, "nightly")
    assert (record.fires, record.skipped, record.outcome, record.detail) == (
        2, 1, "skipped", "reindex")
    assert (await store.job("reindex")).token == running.token

    await store.complete(running.lease, b"1")
    assert (await store.fire_tick(tick_request(TICK + 120, key="reindex"))).outcome == (
        "dispatched")
    assert (await store.job("reindex")).state == "pending"


async def test_distinct_keys_per_tick_dispatch_every_time(store: Store) -> None:
    for n in range(3):
        tick = TICK + 60 * n
        result = await store.fire_tick(tick_request(tick, key=f"reindex-{tick:.0f}"))
        assert result.outcome == "dispatched"

    assert len(await store.jobs("pending")) == 3
    record = await record_of(store, "nightly")
    assert (record.fires, record.skipped) == (3, 0)


async def test_missed_ticks_accumulate(store: Store) -> None:
    await store.fire_tick(tick_request(TICK, missed=2))
    await store.fire_tick(tick_request(TICK + 60, missed=0))
    await store.fire_tick(tick_request(TICK + 600, missed=8))
    await store.fire_tick(tick_request(TICK + 600, missed=5))  # taken: not counted

    record = await record_of(store, "nightly")
    assert (record.fires, record.missed) == (3, 10)


async def test_a_request_counted_from_a_stale_last_tick_is_refused(store: Store) -> None:
    """Two supervisors read last_tick = TICK (every 60 s); one fires TICK + 540 counting
    8 missed, the other, deciding TICK + 600 from its stale read, would count them again."""
    assert (await store.fire_tick(tick_request(TICK, basis=None))).outcome == "fired"
    first = await store.fire_tick(tick_request(TICK + 540, owner="sup-a", missed=8,
                                               basis=TICK))
    assert first.outcome == "fired"

    stale = await store.fire_tick(tick_request(TICK + 600, owner="sup-b", missed=9,
                                               basis=TICK, key="late"))
    assert (stale.outcome, stale.last_tick) == ("stale", TICK + 540)
    record = await record_of(store, "nightly")
    assert (record.last_tick, record.fired_by, record.fires, record.missed) == (
        TICK + 540, "sup-a", 2, 8)
    assert await store.live_among(["late"]) == set()

    again = await store.fire_tick(tick_request(TICK + 600, owner="sup-b", missed=0,
                                               basis=stale.last_tick))
    assert again.outcome == "fired"
    record = await record_of(store, "nightly")
    assert (record.last_tick, record.fires, record.missed) == (TICK + 600, 3, 8)
    assert record.fires + record.missed == 11  # TICK .. TICK + 600, every 60 s


async def test_a_basis_of_never_fired_is_stale_once_a_tick_fired(store: Store) -> None:
    assert (await store.fire_tick(tick_request(TICK, basis=None))).outcome == "fired"
    stale = await store.fire_tick(tick_request(TICK + 60, missed=0, basis=None))
    assert (stale.outcome, stale.last_tick) == ("stale", TICK)
    assert (await store.fire_tick(tick_request(TICK + 60, basis=TICK))).outcome == "fired"


async def test_a_basis_compares_as_a_number(store: Store) -> None:
    await store.fire_tick(tick_request(TICK))
    result = await store.fire_tick(tick_request(TICK + 120, missed=1, basis=int(TICK)))
    assert result.outcome == "fired"
    assert (await record_of(store, "nightly")).missed == 1


async def test_a_request_without_a_basis_adds_missed_as_before(store: Store) -> None:
    """Callers from before the basis (a rolling upgrade) are not checked."""
    await store.fire_tick(tick_request(TICK + 540, missed=8))
    await store.fire_tick(tick_request(TICK + 600, missed=9))
    record = await record_of(store, "nightly")
    assert (record.fires, record.missed) == (2, 17)


async def test_a_released_tick_counted_from_a_stale_basis_is_refused(store: Store) -> None:
    await store.fire_tick(tick_request(TICK))
    await store.fire_tick(tick_request(TICK + 180, owner="sup-a", missed=2, basis=TICK))
    assert await store.record_tick_outcome(fired(TICK + 180), RELEASED, b'{"error": "x"}')

    stale = await store.fire_tick(tick_request(TICK + 180, owner="sup-b", missed=2,
                                               basis=TICK))
    assert (stale.outcome, stale.last_tick) == ("stale", TICK + 180)
    again = await store.fire_tick(tick_request(TICK + 180, owner="sup-b", basis=TICK + 180))
    assert again.outcome == "fired"
    record = await record_of(store, "nightly")
    assert (record.fired_by, record.fires, record.missed) == ("sup-b", 3, 2)


def fired(tick: float = TICK, owner: str = "sup-a") -> FiredTick:
    return FiredTick(schedule="nightly", tick=tick, owner=owner)


async def test_record_tick_outcome_applies_only_to_the_current_tick(store: Store) -> None:
    await store.fire_tick(tick_request(TICK))
    assert await store.record_tick_outcome(fired(), "applied", b'{"started": 2}')
    record = await record_of(store, "nightly")
    assert (record.outcome, record.detail) == ("applied", {"started": 2})

    await store.fire_tick(tick_request(TICK + 60))
    assert not await store.record_tick_outcome(fired(), "error", b'"too late"')
    assert not await store.record_tick_outcome(fired(TICK + 60, "sup-b"), "error", b'"not its"')
    record = await record_of(store, "nightly")
    assert (record.outcome, record.detail, record.last_tick) == ("fired", None, TICK + 60)

    assert not await store.record_tick_outcome(
        FiredTick(schedule="unknown", tick=TICK, owner="sup-a"), "error", b'"nobody"')
    assert [r.name for r in (await store.schedules()).schedules] == ["nightly"]


async def test_a_fractional_tick_matches_exactly(store: Store) -> None:
    tick = TICK + 0.1 + 0.2  # not a round number of milliseconds
    await store.fire_tick(tick_request(tick))

    assert (await store.fire_tick(tick_request(tick))).outcome == "taken"
    assert await store.record_tick_outcome(fired(tick), "applied", b"{}")
    record = await record_of(store, "nightly")
    assert (record.last_tick, record.outcome) == (tick, "applied")


async def test_a_released_tick_fires_again_and_its_first_plan_is_stale(store: Store) -> None:
    # A supervisor stopped mid-plan gives its tick back: another one fires it again.
    await store.fire_tick(tick_request(TICK, owner="sup-a"))
    assert await store.record_tick_outcome(fired(), "released", b'{"error": "drained"}')
    record = await record_of(store, "nightly")
    assert (record.last_tick, record.outcome, record.detail) == (
        TICK, "released", {"error": "drained"})

    again = await store.fire_tick(tick_request(TICK, owner="sup-b"))
    assert (again.outcome, again.last_tick) == ("fired", TICK)
    record = await record_of(store, "nightly")
    assert (record.fired_by, record.outcome, record.fires) == ("sup-b", "fired", 2)
    assert (await store.fire_tick(tick_request(TICK, owner="sup-c"))).outcome == "taken"
    assert not await store.record_tick_outcome(fired(), "applied", b"{}")
    with pytest.raises(StaleTick):
        await store.dispatch_many([new_job("late")], fired=fired())
    assert await store.record_tick_outcome(fired(owner="sup-b"), "applied", b"{}")


async def test_a_tick_whose_outcome_is_recorded_cannot_be_released(store: Store) -> None:
    await store.fire_tick(tick_request(TICK))
    assert await store.record_tick_outcome(fired(), "applied", b"{}")
    assert not await store.record_tick_outcome(fired(), "released", b'{"error": "late"}')
    assert (await record_of(store, "nightly")).outcome == "applied"
    assert (await store.fire_tick(tick_request(TICK, owner="sup-b"))).outcome == "taken"


async def test_schedules_lists_every_record_by_name(store: Store) -> None:
    before = time.time()
    await store.fire_tick(tick_request(schedule="zeta"))
    await store.fire_tick(tick_request(schedule="alpha", key="a-job"))

    book = await store.schedules()

    assert abs(book.store_time - before) < 5
    assert [r.name for r in book.schedules] == ["alpha", "zeta"]
    assert [r.outcome for r in book.schedules] == ["dispatched", "fired"]


async def test_live_keys_of_schedule_lists_exactly_its_live_jobs(store: Store) -> None:
    def job(key: str, schedule: str | None) -> DispatchRequest:
        return DispatchRequest(key=key, handler=HANDLER, payload=b"{}", max_attempts=1,
                               schedule=schedule)

    await store.dispatch_many([job("f1", "feeds"), job("f2", "feeds"), job("f3", "feeds"),
                               job("o1", "other"), job("hand", None)])
    await store.fire_tick(tick_request(schedule="feeds", key="f4"))
    await store.dispatch(new_job("hand2"))
    first = await claim_one(store)  # f1, running: still live
    assert first.key == "f1"
    await store.stop("f2")

    assert await store.live_keys_of_schedule("feeds") == ["f1", "f3", "f4"]
    assert await store.live_keys_of_schedule("other") == ["o1"]
    assert await store.live_keys_of_schedule("none") == []

    # A key of the schedule dispatched again by hand is no longer the schedule's.
    await store.dispatch(job("f2", None))
    await store.complete(first.lease, b"1")
    assert await store.live_keys_of_schedule("feeds") == ["f3", "f4"]
    await store.dispatch(job("f1", "feeds"))
    assert await store.live_keys_of_schedule("feeds") == ["f1", "f3", "f4"]


@pytest.mark.parametrize("total", [10_000])
async def test_live_keys_of_schedule_with_many_jobs(store: Store, total: int) -> None:
    requests = [DispatchRequest(key=f"k{i:05}", handler=HANDLER, payload=b"{}",
                                max_attempts=1, schedule="big" if i % 2 else "small")
                for i in range(total)]
    for start in range(0, total, 500):
        assert all(await store.dispatch_many(requests[start:start + 500]))

    keys = await store.live_keys_of_schedule("big")

    assert keys == [f"k{i:05}" for i in range(1, total, 2)]


async def test_a_ticks_job_belongs_to_the_schedule_even_if_its_request_names_none(
    store: Store,
) -> None:
    job = DispatchRequest(key="reindex", handler=HANDLER, payload=b"{}", max_attempts=1)
    request = TickRequest(schedule="nightly", tick=TICK, not_before=TICK, fingerprint="fp",
                          owner="sup-a", dispatch=job)

    assert (await store.fire_tick(request)).outcome == "dispatched"

    assert (await store.job("reindex")).schedule == "nightly"
    assert await store.live_keys_of_schedule("nightly") == ["reindex"]


async def test_a_ticks_job_may_be_delayed(store: Store) -> None:
    run_at = time.time() + 60
    job = DispatchRequest(key="later", handler=HANDLER, payload=b"{}", max_attempts=1,
                          run_at=run_at)
    await store.fire_tick(TickRequest(schedule="nightly", tick=TICK, not_before=TICK,
                                      fingerprint="fp", owner="sup-a", dispatch=job))

    record = await store.job("later")
    assert record.run_at == pytest.approx(run_at, abs=0.001)
    assert (await claim(store)).next_due_in == pytest.approx(60, abs=1)


async def test_supervisors_whose_settings_differ_fire_one_tick_once(store: Store) -> None:
    # A rolling deploy changes a schedule: old and new configs race for one tick.
    old = await store.fire_tick(tick_request(owner="old", key="r-old", fingerprint="fp-old"))
    new = await store.fire_tick(tick_request(owner="new", key="r-new", fingerprint="fp-new"))

    assert (old.outcome, new.outcome) == ("dispatched", "taken")
    assert [job.key for job in await store.jobs()] == ["r-old"]
    assert (await record_of(store, "nightly")).fingerprint == "fp-old"
    later = await store.fire_tick(tick_request(TICK + 60, owner="new", key="r-new",
                                               fingerprint="fp-new"))
    assert later.outcome == "dispatched"
    assert (await record_of(store, "nightly")).fingerprint == "fp-new"
