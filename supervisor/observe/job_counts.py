"""`poolsup_jobs`: the pool's jobs by state, read from the store every few seconds, with
the pending ones by handler (`poolsup_jobs{state="pending",handler="thumbnail"}`), which an
autoscaler reads (a KEDA ScaledObject: deploy/kubernetes/keda-scaledobject.yaml).

A collector of its own rather than a Gauge: a Gauge's series all have the same labels,
and `handler` belongs to the pending jobs only (the others keep `{state="..."}` alone, as
before it came). The pending jobs are those of the supervisor's own handlers, 0 included,
so that a scaler sees an idle handler as 0, not as a missing series.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

NAME = "poolsup_jobs"
HELP = ("Jobs of the pool by state, the pending ones by handler (of this supervisor's "
        "handlers), read every 5 s")


class JobCounts:
    """Written by the event loop (whole-value assignments), read by the scrape thread."""

    def __init__(self) -> None:
        self._states: Mapping[str, int] = {}
        self._pending: Mapping[str, int] = {}

    def update(self, states: Mapping[str, int], pending: Mapping[str, int]) -> None:
        self._states, self._pending = dict(states), dict(pending)

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import Metric

        family = Metric(NAME, HELP, "gauge")
        states, pending = self._states, self._pending
        for state, count in states.items():
            if state != "pending":
                family.add_sample(NAME, {"state": state}, count)
        for handler, count in pending.items():
            family.add_sample(NAME, {"state": "pending", "handler": handler}, count)
        yield family
