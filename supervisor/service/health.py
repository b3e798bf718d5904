"""The event loop's check-in for `/healthz` and `/readyz`: every second, after pinging the
fork server, it writes what it saw to `observe.health`, which the metrics server's thread
reads."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from supervisor.forks.fork_client import ForkServerClient
from supervisor.observe.health import health

CHECK_IN_EVERY = 1.0
PING_TIMEOUT = 2.0


async def check_in(fork_server: Callable[[], ForkServerClient | None]) -> None:
    """Forever: ping the fork server, then note that the loop and it are alive."""
    while True:
        server = fork_server()
        answered = server is not None and await server.ping(PING_TIMEOUT)
        health.fork_server_answered = answered
        health.checked_at = time.monotonic()
        await anyio.sleep(CHECK_IN_EVERY)
