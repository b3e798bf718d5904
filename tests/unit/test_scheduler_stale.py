"""The scheduler decides a tick again at once when the store refuses it as stale."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from supervisor.config import ScheduleConfig
from supervisor.forks.fork_client import ForkServerClient
from supervisor.pool.scheduler import Scheduler
from supervisor.store.base import Store
from supervisor.store.records import (
    UNCHECKED,
    ScheduleBook,
    ScheduleRecord,
    TickRequest,
    TickResult,
    basis_moved,
)

pytestmark = pytest.mark.anyio

NOW = 3000.0


class StaleReadStore:
    """Shows the record as it was before another supervisor fired tick 2700 (every
    300 s, last read at 0); fires as a store does, checking the basis."""

    def __init__(self) -> None:
        self.last_tick = 2700.0
        self.missed = 8
        self.fires = 2
        self.requests: list[TickRequest] = []

    async def schedules(self) -> ScheduleBook:
        record = ScheduleRecord(name="s", last_tick=0.0, fingerprint=None, fired_by="b",
                                fired_at=0.0, outcome="dispatched")
        return ScheduleBook(store_time=NOW, schedules=(record,))

    async def fire_tick(self, request: TickRequest) -> TickResult:
        self.requests.append(request)
        if self.last_tick >= request.tick:
            return TickResult(outcome="taken", store_time=NOW, last_tick=self.last_tick)
        if basis_moved(request, self.last_tick):
            return TickResult(outcome="stale", store_time=NOW, last_tick=self.last_tick)
        self.last_tick, self.fires = request.tick, self.fires + 1
        self.missed += request.missed
        return TickResult(outcome="dispatched", store_time=NOW, last_tick=request.tick)


def no_fork_server() -> ForkServerClient:
    raise AssertionError("a handler schedule runs no producer")


async def test_a_stale_tick_is_decided_again_and_fires_with_its_misses_counted_once() -> None:
    store = StaleReadStore()
    schedule = ScheduleConfig(name="s", every=300, handler="echo", key="s-{tick}")
    scheduler = Scheduler(store=cast(Store, store), owner="a", schedules={"s": schedule},
                          handlers={}, fork_server=no_fork_server, max_payload=1 << 20,
                          max_result=1 << 20)
    async with anyio.create_task_group() as producers:
        await scheduler._round(producers)

    assert [(r.tick, r.missed, r.basis) for r in store.requests] == [
        (3000.0, 9, 0.0), (3000.0, 0, 2700.0)]
    assert (store.last_tick, store.fires, store.missed) == (3000.0, 3, 8)
    assert store.fires + store.missed == 11  # ticks 0 .. 3000
    assert all(r.basis is not UNCHECKED for r in store.requests)
