"""The current fork server, and older ones kept until their last child is gone.

SIGHUP starts a fresh fork server with the reloaded handler files; jobs already
running stay with the fork server that forked them (it also fences them), which
closes once they are all done.  A fork server that dies is replaced the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
import anyio.abc

from supervisor.children import ForkServerClient, open_fork_server
from supervisor.config import HandlerConfig

log = logging.getLogger("poolsup.children")

RETIRE_POLL = 0.2


class ForkServers:
    def __init__(self, group: anyio.abc.TaskGroup) -> None:
        self._group = group
        self._current: ForkServerClient | None = None
        self._retire: dict[ForkServerClient, anyio.Event] = {}

    @property
    def current(self) -> ForkServerClient:
        assert self._current is not None, "no fork server started"
        return self._current

    async def start(self, handlers: Mapping[str, HandlerConfig]) -> ForkServerClient:
        """Start a fork server for `handlers`; it serves every spawn from now on."""
        server: ForkServerClient = await self._group.start(self._generation, dict(handlers))
        previous, self._current = self._current, server
        if previous is not None:
            self._retire[previous].set()
        for name, error in server.handler_errors.items():
            if error:
                last_line = error.strip().splitlines()[-1] if error.strip() else "?"
                log.error("handler %s cannot run; its jobs will fail: %s", name, last_line)
        return server

    async def _generation(
        self,
        handlers: dict[str, HandlerConfig],
        *,
        task_status: anyio.abc.TaskStatus[ForkServerClient],
    ) -> None:
        async with open_fork_server(handlers) as server:
            retire = self._retire[server] = anyio.Event()
            task_status.started(server)
            await retire.wait()
            while server.alive and server.child_count:
                with anyio.move_on_after(RETIRE_POLL):
                    await server.died.wait()
            del self._retire[server]
            log.info("retired fork server %d", server.pid)
