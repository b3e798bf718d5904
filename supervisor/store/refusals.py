"""Why a store refused to add a job, in the words both stores use."""

from __future__ import annotations

from supervisor.errors import DispatchRefused, JobExists, PoolFull
from supervisor.store.records import DispatchRequest

# What a store's dispatch says of each request.
ADDED, LIVE, FINISHED_WITHIN_UNIQUE_WINDOW, POOL_FULL = 1, 0, 2, 3


def refusal(request: DispatchRequest, code: int, max_pending: int | None) -> DispatchRefused | None:
    """The error for a request the store did not add (None where it did)."""
    if code == ADDED:
        return None
    if code == FINISHED_WITHIN_UNIQUE_WINDOW:
        return JobExists(f"job {request.key!r} finished within its unique window of "
                         f"{request.unique_for:g} s")
    if code == POOL_FULL:
        return PoolFull(f"job {request.key!r} refused: the pool holds {max_pending} pending "
                        f"jobs, its max_pending")
    return JobExists(f"job {request.key!r} is already live (pending or running)")
