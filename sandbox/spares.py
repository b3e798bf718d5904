"""Children waiting for a job: the one forked ahead, and those that ran a job of a
handler with max_jobs_per_child > 1 and wait for the next job of that handler."""

from __future__ import annotations

import socket
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(eq=False, kw_only=True)
class WarmChild:
    """A child waiting on `assignment` to be handed a job."""

    pid: int
    assignment: socket.socket


class IdleChildren:
    """Children that ran a job and are clean for the next of the same handler
    (`sandbox.reuse`), newest last: the next job goes to the child used last."""

    def __init__(self) -> None:
        self._by_handler: dict[str, list[WarmChild]] = {}

    def put(self, handler: str, child: WarmChild) -> None:
        self._by_handler.setdefault(handler, []).append(child)

    def take(self, handler: str) -> WarmChild | None:
        waiting = self._by_handler.get(handler)
        return waiting.pop() if waiting else None

    def pids(self) -> set[int]:
        return {child.pid for waiting in self._by_handler.values() for child in waiting}

    def forget(self, pids: Collection[int]) -> None:
        """Drop the children that died (`pids`, reaped), closing their sockets."""
        if not pids:
            return
        for handler, waiting in self._by_handler.items():
            for child in waiting:
                if child.pid in pids:
                    child.assignment.close()
            self._by_handler[handler] = [child for child in waiting if child.pid not in pids]

    def close_all(self) -> None:
        """End of stream to every idle child: each exits."""
        for waiting in self._by_handler.values():
            for child in waiting:
                child.assignment.close()
        self._by_handler.clear()
