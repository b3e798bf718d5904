"""What `status` reports of the handlers' pool-wide limits: how much of each is in use, and
whether a handler's due jobs wait on one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from supervisor.core.limits import Limits, next_rate_slot
from supervisor.store.records import JobRecord


def limit_view(limits: Limits, running: Sequence[JobRecord], starts: Sequence[float] | None,
               now: float) -> dict[str, Any]:
    """One handler's limits and their use: `running` are its running jobs, `starts` its
    starts within its rate's period (store times, read at `now`)."""
    view: dict[str, Any] = {"max_running": limits.max_running, "running": len(running),
                            "max_running_per_group": limits.max_running_per_group,
                            "rate_limit": None if limits.rate is None else str(limits.rate)}
    full = limits.max_running is not None and len(running) >= limits.max_running
    if limits.rate is not None and starts is not None:
        slot = next_rate_slot(starts, now, limits.rate)
        view["starts_in_period"] = len(starts)
        view["next_start_in"] = None if slot is None else round(max(0.0, slot - now), 3)
        full = full or slot is not None
    view["at_limit"] = full
    return view
