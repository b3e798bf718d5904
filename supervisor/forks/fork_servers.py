"""The current fork server, and older ones kept until their last child is gone.

SIGHUP starts a fresh fork server with the reloaded handler files; jobs already
running stay with the fork server that forked them (it also fences them), which
closes once they are all done.  A fork server that dies is replaced the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import anyio
import anyio.abc

from supervisor.config import HandlerConfig
from supervisor.core.blame import LastFork, Verdict, is_suspect, judge_death, spawn_wait
from supervisor.forks.fork_client import ForkServerClient
from supervisor.forks.launch import open_fork_server

log = logging.getLogger("poolsup.children")

RETIRE_POLL = 0.2
READY_POLL = 0.05


class ForkServers:
    def __init__(self, group: anyio.abc.TaskGroup, *, tracing: bool = False) -> None:
        self._group = group
        self._tracing = tracing  # the fork servers preload OpenTelemetry for jobs' spans
        self._current: ForkServerClient | None = None
        self._retire: dict[ForkServerClient, anyio.Event] = {}
        self._referee = Referee()  # one across fork servers: it remembers suspects

    @property
    def current(self) -> ForkServerClient:
        assert self._current is not None, "no fork server started"
        return self._current

    @property
    def spawn_possible(self) -> bool:
        return self.current.alive

    async def ready(self) -> None:
        """Until the current fork server is alive (a dead one is being replaced)."""
        # Polled, and only in the moments while a dead fork server is being replaced.
        while not self.current.alive:  # noqa: ASYNC110
            await anyio.sleep(READY_POLL)

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
        for name, note in server.sandbox_notes.items():
            log.warning("handler %s: its sandbox cannot %s on this host", name, note)
        return server

    async def _generation(
        self,
        handlers: dict[str, HandlerConfig],
        *,
        task_status: anyio.abc.TaskStatus[ForkServerClient],
    ) -> None:
        async with open_fork_server(handlers, referee=self._referee,
                                    tracing=self._tracing) as server:
            retire = self._retire[server] = anyio.Event()
            task_status.started(server)
            await retire.wait()
            while server.alive and server.child_count:
                with anyio.move_on_after(RETIRE_POLL):
                    await server.died.wait()
            del self._retire[server]
            log.info("retired fork server %d", server.pid)


class Referee:
    """Who pays for a fork server's death (`core.blame`): remembers the suspects of
    one death, and forks each of them alone while it does."""

    def __init__(self) -> None:
        self._suspected: Mapping[str, float] = {}
        self._last_fork: LastFork | None = None

    async def before_fork(self, key: str) -> None:
        # A sleep, not an event: the wait ends with time, and is rare (after a death).
        # The loop's clock, anyio.current_time() on asyncio without its backend lookup
        # (twice a job); `judge` compares it with the children's `forked_at`, the same.
        clock = asyncio.get_running_loop().time
        while wait := spawn_wait(key, self._suspected, self._last_fork,  # noqa: ASYNC110
                                 clock()):
            await anyio.sleep(wait)
        now = clock()
        self._last_fork = LastFork(at=now, suspect=is_suspect(key, self._suspected, now))

    def judge(self, forked_at: Mapping[str, float]) -> Mapping[str, Verdict]:
        judgement = judge_death(forked_at, self._suspected, anyio.current_time())
        self._suspected = judgement.suspected
        return judgement.verdicts


def sandbox_notes(server: ForkServerClient) -> tuple[str, ...]:
    """What the handlers' sandboxes cannot enforce on this host, for `status`."""
    return tuple(f"{name}: cannot {note}" for name, note in sorted(server.sandbox_notes.items()))
