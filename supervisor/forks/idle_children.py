"""Reused children between two jobs, as the supervisor keeps them: a child of a handler
with max_jobs_per_child > 1 that said "done" on its channel waits here, its channel
open, for the next job of its handler, which the supervisor starts on that channel
(`ForkServerClient.start`). One idle too long is retired: its channel is closed, and
it exits at the end of stream."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

# Seconds a child that ran a job may wait for the next of its handler before it is
# retired: a child kept for a burst of jobs does not hold its memory for good after it.
IDLE_LIMIT = 60.0
# Only for tests, which cannot wait a minute: the supervisor reads it when it starts a
# fork server.
IDLE_LIMIT_VARIABLE = "_POOLSUP_TEST_IDLE_LIMIT"
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT  # an idle child's channel, left unread


@dataclass(frozen=True, kw_only=True)
class IdleChild:
    """A reused child waiting for its next job on its own channel."""

    pid: int
    control: socket.socket
    output: socket.socket
    jobs_left: int = 0  # how many more it may run (max_jobs_per_child); 0: not counted

    def close(self) -> None:
        """Retire it: at the end of stream it exits."""
        self.control.close()
        self.output.close()


class IdleChildren:
    """Idle reused children by handler, newest last: the next job goes to the child
    used last, so that the others age out when there are fewer jobs. Times are the
    event loop's, passed in."""

    def __init__(self, limit: float = IDLE_LIMIT) -> None:
        self.limit = limit
        self._by_handler: dict[str, list[tuple[IdleChild, float]]] = {}  # and since when
        self._retiring: asyncio.TimerHandle | None = None  # `keep`'s timer

    def keep(self, handler: str, child: IdleChild) -> None:
        """`put` it now, and retire it if it waits past the limit."""
        loop = asyncio.get_running_loop()
        self.put(handler, child, loop.time())
        if self._retiring is None:
            self._retiring = loop.call_later(self.limit, self._retire)

    def take_waiting(self, handler: str) -> IdleChild | None:
        """The idle child of `handler` used last that still waits; those gone (end of
        stream) are closed on the way."""
        while (idle := self.take(handler)) is not None:
            try:
                idle.control.recv(1, _PEEK)
            except BlockingIOError:
                return idle  # nothing to read: it waits
            except OSError:
                pass
            idle.close()  # gone, or it spoke out of turn
        return None

    def close_all(self) -> None:
        """Retire every idle child."""
        for child in self.take_all():
            child.close()
        if self._retiring is not None:
            self._retiring.cancel()
            self._retiring = None

    def _retire(self) -> None:
        loop = asyncio.get_running_loop()
        for child in self.expired(loop.time()):
            child.close()
        due = self.next_expiry()
        self._retiring = None if due is None else loop.call_at(due, self._retire)

    def __bool__(self) -> bool:
        return any(self._by_handler.values())

    def put(self, handler: str, child: IdleChild, now: float) -> None:
        self._by_handler.setdefault(handler, []).append((child, now))

    def take(self, handler: str) -> IdleChild | None:
        waiting = self._by_handler.get(handler)
        return waiting.pop()[0] if waiting else None

    def expired(self, now: float) -> list[IdleChild]:
        """Take out every child idle for longer than the limit (to be retired)."""
        old: list[IdleChild] = []
        for handler, waiting in self._by_handler.items():
            if waiting and now - waiting[0][1] > self.limit:  # the oldest first
                old.extend(child for child, since in waiting if now - since > self.limit)
                self._by_handler[handler] = [
                    (child, since) for child, since in waiting if now - since <= self.limit
                ]
        return old

    def next_expiry(self) -> float | None:
        """When the child idle longest goes past the limit, if any waits."""
        oldest = [waiting[0][1] for waiting in self._by_handler.values() if waiting]
        return min(oldest) + self.limit if oldest else None

    def take_all(self) -> list[IdleChild]:
        children = [child for waiting in self._by_handler.values() for child, _ in waiting]
        self._by_handler.clear()
        return children
