"""The supervisor's health, for `/healthz` and `/readyz` (core/health.py decides): the
event loop checks in every second after pinging the fork server, and the metrics
server's thread reads what it last wrote."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from supervisor.core.health import liveness_problem, readiness_problem
from supervisor.forks.fork_client import ForkServerClient

CHECK_IN_EVERY = 1.0
PING_TIMEOUT = 2.0


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


async def check_in(fork_server: Callable[[], ForkServerClient | None]) -> None:
    """Forever: ping the fork server, then note that the loop and it are alive."""
    while True:
        server = fork_server()
        answered = server is not None and await server.ping(PING_TIMEOUT)
        health.fork_server_answered = answered
        health.checked_at = time.monotonic()
        await anyio.sleep(CHECK_IN_EVERY)
