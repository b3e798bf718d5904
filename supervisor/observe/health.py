"""The supervisor's health, for `/healthz` and `/readyz` (core/health.py decides): the
event loop checks in (service/health.py), and the metrics server's thread reads what it
last wrote."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from supervisor.core.health import liveness_problem, readiness_problem


@dataclass
class HealthState:
    """Written by the event loop, read by the metrics server's thread (whole-value
    assignments: no lock needed)."""

    checked_at: float | None = None  # monotonic
    fork_server_answered: bool = False
    serving: bool = False
    draining: bool = False
    store_failing: Callable[[], bool] = lambda: False

    def liveness(self) -> str | None:
        return liveness_problem(now=time.monotonic(), checked_at=self.checked_at,
                                fork_server_answered=self.fork_server_answered)

    def readiness(self) -> str | None:
        return readiness_problem(alive=self.liveness(), serving=self.serving,
                                 draining=self.draining, store_failing=self.store_failing())


health = HealthState()
