"""Why a store refused to add a job, in the words every store uses."""

from __future__ import annotations

from supervisor.errors import DispatchRefused, JobExists, PoolFull
from supervisor.store.records import DispatchRequest

# What a store's dispatch says of each request.
ADDED, LIVE, FINISHED_WITHIN_UNIQUE_WINDOW, POOL_FULL = 1, 0, 2, 3


def refusal(request: DispatchRequest, code: int, max_pending: int | None) -> DispatchRefused | None:
    """The error for a request the store did not add (None where it did); its message
    is "job KEY ", then "is " for a live key, then `refusal_reason`."""
    why = refusal_reason(request, code, max_pending)
    if why is None:
        return None
    error = PoolFull if code == POOL_FULL else JobExists
    return error(f"job {request.key!r} {'is ' if code == LIVE else ''}{why}")


def refusal_reason(request: DispatchRequest, code: int, max_pending: int | None) -> str | None:
    """Why the store did not add the request, in one line (None where it did)."""
    if code == ADDED:
        return None
    if code == FINISHED_WITHIN_UNIQUE_WINDOW:
        return f"finished within its unique window of {request.unique_for:g} s"
    if code == POOL_FULL:
        return f"refused: the pool holds {max_pending} pending jobs, its max_pending"
    return "already live (pending or running)"


def reason_of(refused: DispatchRefused, key: str) -> str:
    """A refusal's message without its leading "job KEY " (and "is ")."""
    return refused.message.removeprefix(f"job {key!r} ").removeprefix("is ")
