"""The line `status` prints of a handler's pool-wide limits (reports/limits.py builds them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def limit_line(handler: str, view: Mapping[str, Any]) -> str:
    parts = []
    if view["max_running"] is not None:
        parts.append(f"{view['running']}/{view['max_running']} running")
    if view["max_running_per_group"] is not None:
        parts.append(f"{view['max_running_per_group']} per group")
    if view["rate_limit"] is not None:
        rate = f"rate {view['rate_limit']}, {view.get('starts_in_period', 0)} started"
        if view.get("next_start_in") is not None:
            rate += f", next start in {view['next_start_in']:.1f}s"
        parts.append(rate)
    flag = "at its limit: due jobs wait" if view["at_limit"] else "within its limits"
    return f"limits of {handler}: " + "; ".join(parts) + f" ({flag})"
