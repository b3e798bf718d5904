"""Applying a producer's plan to the pool: start what is missing, stop what it names.

Starts go to the store in chunks of `DISPATCH_CHUNK`, one round trip each, yielding
between chunks, so a plan of 10,000 jobs never holds the store (or this loop) for long.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

from supervisor.core.plans import Plan, PlanDiff, diff_plan
from supervisor.errors import JobNotFound
from supervisor.store.base import DISPATCH_CHUNK, DispatchRequest, Store


async def plan_diff(store: Store, schedule: str, plan: Plan) -> PlanDiff:
    """What applying `plan` would change now, read from the store."""
    live = {record.key for state in ("pending", "running") for record in await store.jobs(state)}
    own = set(await store.live_keys_of_schedule(schedule))
    return diff_plan(plan, live=live, own_live=own)


async def apply_plan(
    store: Store, schedule: str, plan: Plan, *, max_attempts: Callable[[str], int]
) -> dict[str, Any]:
    """Apply `plan`; the counts of what it did.  A job that became live meanwhile is
    kept, and one that finished meanwhile is not an error."""
    diff = await plan_diff(store, schedule, plan)
    started = 0
    kept = len(diff.keep)
    for first in range(0, len(diff.start), DISPATCH_CHUNK):
        chunk = diff.start[first:first + DISPATCH_CHUNK]
        created = await store.dispatch_many([
            DispatchRequest(key=job.key, handler=job.handler, payload=job.payload,
                            max_attempts=max_attempts(job.handler), schedule=schedule)
            for job in chunk
        ])
        started += sum(created)
        kept += len(created) - sum(created)
        await anyio.lowlevel.checkpoint()
    stopped = 0
    for key in diff.stop:
        try:
            await store.stop(key)
        except JobNotFound:
            continue
        stopped += 1
    return {"started": started, "kept": kept, "stopped": stopped}
