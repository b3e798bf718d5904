"""Applying a producer's plan to the pool: start what is missing, stop what it names.

Starts go to the store in chunks of `DISPATCH_CHUNK`, one round trip each, yielding
between chunks, so a plan of 10,000 jobs never holds the store (or this loop) for long.

Every write carries the plan's tick (`FiredTick`) and the store makes it in the same
atomic step as it checks that the tick is still current: once a newer tick fired (its
producer reads the pool after that), the rest of an older plan changes nothing
(`StaleTick`), so an older plan can never undo a newer one.

Planning reads the schedule's own live jobs (an index per schedule) and the states of
the keys the plan names, never the pool's live jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from supervisor.core.plans import Plan, PlanDiff, diff_plan
from supervisor.errors import JobNotFound
from supervisor.store.base import Store
from supervisor.store.records import DISPATCH_CHUNK, DispatchRequest, FiredTick


async def plan_diff(store: Store, schedule: str, plan: Plan) -> PlanDiff:
    """What applying `plan` would change now, read from the store."""
    named = [*(job.key for job in plan.start), *plan.stop]
    live = await store.live_among(named)
    own = set(await store.live_keys_of_schedule(schedule))
    return diff_plan(plan, live=live | own, own_live=own)


async def apply_plan(
    store: Store, fired: FiredTick, plan: Plan, *, max_attempts: Callable[[str], int]
) -> dict[str, Any]:
    """Apply the plan of the tick `fired`; the counts of what it did.  A job that became
    live meanwhile is kept, and one that finished meanwhile is not an error.  Raises
    `StaleTick` when the tick is no longer current (what was done before stays)."""
    diff = await plan_diff(store, fired.schedule, plan)
    started = 0
    kept = len(diff.keep)
    for first in range(0, len(diff.start), DISPATCH_CHUNK):
        chunk = diff.start[first:first + DISPATCH_CHUNK]
        created = await store.dispatch_many([
            DispatchRequest(key=job.key, handler=job.handler, payload=job.payload,
                            max_attempts=max_attempts(job.handler), schedule=fired.schedule)
            for job in chunk
        ], fired=fired)
        started += sum(created)
        kept += len(created) - sum(created)
        await anyio.lowlevel.checkpoint()
    stopped = 0
    for key in diff.stop:
        try:
            await store.stop(key, fired=fired)
        except JobNotFound:
            continue
        stopped += 1
    return {"started": started, "kept": kept, "stopped": stopped}
