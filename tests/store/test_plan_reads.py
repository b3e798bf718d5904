"""Planning reads the schedule's own jobs and the keys its plan names, never the pool's
live jobs (a backlog of millions, payloads included, on every producer tick)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from supervisor.core.plans import Plan, PlannedJob
from supervisor.pool.plan_apply import plan_diff
from supervisor.store.base import Store
from supervisor.store.records import DispatchRequest

pytestmark = pytest.mark.anyio


def planned(key: str) -> PlannedJob:
    return PlannedJob(key=key, handler="follow", payload=b"{}")


class CallLog:
    """A real store that logs which of its methods were called."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self._store, name)


async def test_planning_reads_only_the_schedules_own_jobs_and_the_planned_keys(
    store: Store,
) -> None:
    await store.dispatch_many([
        DispatchRequest(key=f"backlog-{n}", handler="follow", payload=b'{"big": 1}',
                        max_attempts=1) for n in range(50)])
    await store.dispatch_many([
        DispatchRequest(key=key, handler="follow", payload=b"{}", max_attempts=1,
                        schedule="feeds") for key in ("a", "b")])
    plan = Plan(start=(planned("b"), planned("c")), stop=("backlog-1", "gone"),
                stop_others=True)
    logged = CallLog(store)
    diff = await plan_diff(cast(Store, logged), "feeds", plan)
    assert (diff.start, diff.keep, diff.stop) == ((planned("c"),), ("b",), ("backlog-1", "a"))
    assert not {"jobs", "snapshot", "job"} & set(logged.calls), logged.calls
