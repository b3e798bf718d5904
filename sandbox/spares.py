"""Children waiting for a job: the one forked ahead, and those that ran a job of a
handler with max_jobs_per_child > 1 and wait for the next job of that handler."""

from __future__ import annotations

import socket
from collections.abc import Collection
from dataclasses import dataclass

# Seconds a child that ran a job may wait for the next of its handler before it is
# retired: a child kept for a burst of jobs does not hold its memory for good after it.
IDLE_LIMIT = 60.0
# Only for tests, which cannot wait a minute: the fork server reads it once, at its start,
# from its environment (and removes it from there).
IDLE_LIMIT_VARIABLE = "_POOLSUP_TEST_IDLE_LIMIT"


@dataclass(eq=False, kw_only=True)
class WarmChild:
    """A child waiting on `assignment` to be handed a job."""

    pid: int
    assignment: socket.socket


class IdleChildren:
    """Children that ran a job and are clean for the next of the same handler
    (`sandbox.reuse`), newest last: the next job goes to the child used last.

    A child that waited longer than `limit` seconds is retired (`retire_idle`): its
    socket is closed, and it exits as a child that gets no job does. Until it is reaped
    it still counts among `pids`, so that it is not killed as a job's leftover.
    """

    def __init__(self, limit: float = IDLE_LIMIT) -> None:
        self._limit = limit
        self._by_handler: dict[str, list[tuple[WarmChild, float]]] = {}  # and since when
        self._retiring: set[int] = set()

    def put(self, handler: str, child: WarmChild, now: float) -> None:
        self._by_handler.setdefault(handler, []).append((child, now))

    def take(self, handler: str) -> WarmChild | None:
        waiting = self._by_handler.get(handler)
        return waiting.pop()[0] if waiting else None

    def pids(self) -> set[int]:
        waiting = {child.pid for queue in self._by_handler.values() for child, _ in queue}
        return waiting | self._retiring

    def retire_idle(self, now: float) -> None:
        """End of stream to every child idle for longer than the limit: each exits."""
        for handler, waiting in self._by_handler.items():
            if waiting and now - waiting[0][1] > self._limit:  # the oldest first
                for child, since in waiting:
                    if now - since > self._limit:
                        child.assignment.close()
                        self._retiring.add(child.pid)
                self._by_handler[handler] = [
                    (child, since) for child, since in waiting if now - since <= self._limit
                ]

    def forget(self, pids: Collection[int]) -> None:
        """Drop the children that died (`pids`, reaped), closing their sockets."""
        if not pids:
            return
        self._retiring.difference_update(pids)
        for handler, waiting in self._by_handler.items():
            for child, _ in waiting:
                if child.pid in pids:
                    child.assignment.close()
            self._by_handler[handler] = [
                (child, since) for child, since in waiting if child.pid not in pids
            ]

    def close_all(self) -> None:
        """End of stream to every idle child: each exits."""
        for waiting in self._by_handler.values():
            for child, _ in waiting:
                child.assignment.close()
        self._by_handler.clear()
