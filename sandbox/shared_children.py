"""The fork server's shared children: those of an async handler with child_concurrency
> 1, each running up to that many of its jobs at once (`sandbox.shared`). A spawn of
such a handler joins the fullest of its children with room, so that a few children
hold many jobs and the others empty and retire; one left without a job longer than
the idle limit is killed."""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass


@dataclass(eq=False, kw_only=True)
class SharedChild:
    pid: int
    handler: str
    # Open for the child's life: its further jobs go in there, its reports come out.
    assignment: socket.socket
    slot: int  # its slot in sandbox.step_marks
    idle_since: float | None = None


class SharedChildren:
    def __init__(self, idle_limit: float) -> None:
        self._idle_limit = idle_limit
        self._by_pid: dict[int, SharedChild] = {}

    def __iter__(self) -> Iterator[SharedChild]:
        return iter(list(self._by_pid.values()))

    def add(self, child: SharedChild) -> None:
        self._by_pid[child.pid] = child

    def get(self, pid: int) -> SharedChild | None:
        return self._by_pid.get(pid)

    def pids(self) -> set[int]:
        return set(self._by_pid)

    def with_room(self, handler: str, concurrency: int, jobs_in: Callable[[int], int],
                  ending: Callable[[int], bool]) -> SharedChild | None:
        """The child of `handler` that runs the most jobs and has room for one more (not
        one being killed)."""
        best, best_jobs = None, -1
        for child in self._by_pid.values():
            if child.handler != handler or ending(child.pid):
                continue
            held = jobs_in(child.pid)
            if best_jobs < held < concurrency:
                best, best_jobs = child, held
        return best

    def idle_too_long(self, now: float) -> list[SharedChild]:
        return [child for child in self._by_pid.values()
                if child.idle_since is not None and now - child.idle_since >= self._idle_limit]

    def next_due(self) -> float | None:
        return min((child.idle_since + self._idle_limit for child in self._by_pid.values()
                    if child.idle_since is not None), default=None)

    def forget(self, dead: Collection[int]) -> list[SharedChild]:
        """The children among `dead` pids, no longer kept (their sockets still open)."""
        return [self._by_pid.pop(pid) for pid in dead if pid in self._by_pid]

    def close(self) -> None:
        for child in self._by_pid.values():
            child.assignment.close()
        self._by_pid.clear()
