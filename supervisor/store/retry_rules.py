"""What `retry` takes and what it refuses, the same on every store."""

from __future__ import annotations

from supervisor.errors import DispatchRefused, JobExists
from supervisor.store.records import LIVE_STATES

RETRYABLE_STATES: frozenset[str] = frozenset({"failed", "stopped"})


def refuse_retry(key: str, state: str) -> None:
    """Raise why a job in `state` cannot be retried; return if it can.  A succeeded job
    is refused, not run again: its work is done, and running it again is a new dispatch
    of the key, which says so (see the README, "Retry")."""
    if state in RETRYABLE_STATES:
        return
    if state in LIVE_STATES:
        raise JobExists(f"job {key!r} is {state}: only a failed or stopped job can be retried")
    raise DispatchRefused(f"job {key!r} {state}: only a failed or stopped job can be retried "
                          f"(dispatch it again to run it anew)")
