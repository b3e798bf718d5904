"""A dead fork server is replaced at once; the supervisor gives up (exit 1) only on the
deaths no job explains (`core/restarts.py`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import anyio

from supervisor.config import HandlerConfig
from supervisor.core.restarts import ForkServerEnd, GiveUp, decide_restart, recent_ends
from supervisor.forks.fork_servers import ForkServers

log = logging.getLogger("poolsup")


async def replace_dead_fork_servers(
    fork_servers: ForkServers,
    code: Callable[[], Mapping[str, HandlerConfig]],
    give_up: Callable[[], None],
) -> None:
    """Start a new fork server (with `code()`) whenever the current one dies; call
    `give_up` and return when the deaths say so."""
    ends: list[ForkServerEnd] = []
    while True:
        current = fork_servers.current
        await current.died.wait()
        if current is not fork_servers.current:
            continue  # a retired one died; nothing new to start
        now = anyio.current_time()
        ends = recent_ends([*ends, ForkServerEnd(at=now, uptime=now - current.started_at,
                                                 forked=current.forked)], now)
        log.error("fork server %d died; starting a new one", current.pid)
        while current is fork_servers.current:
            decision = decide_restart(ends, anyio.current_time())
            if isinstance(decision, GiveUp):
                log.error("fork server keeps dying (%s); shutting down", decision.why)
                give_up()
                return
            await anyio.sleep(decision.delay)
            try:
                await fork_servers.start(code())
            except Exception as error:
                log.error("could not start a fork server: %s", str(error) or type(error).__name__)
                ends.append(ForkServerEnd(at=anyio.current_time(), uptime=0.0, forked=False))
