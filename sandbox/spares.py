"""Children waiting for a job: those forked ahead, and those that ran a job of a
handler with max_jobs_per_child > 1 and wait, on their own channel to the supervisor,
for the next job of that handler."""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(eq=False, kw_only=True)
class WarmChild:
    """A child waiting on `assignment` to be handed a job."""

    pid: int
    assignment: socket.socket


class WarmChildren:
    """The children forked ahead, oldest first, each waiting on its assignment socket.

    Forked `batch` at a time, when none is left: after each fork the fork server copies
    every page it writes first (the fork shared them all with the new child again), so
    forking several in a row pays for those copies once for all of them."""

    def __init__(self, batch: int) -> None:
        self.batch = batch
        self._children: deque[WarmChild] = deque()

    def __bool__(self) -> bool:
        return bool(self._children)

    def add(self, child: WarmChild) -> None:
        self._children.append(child)

    def take(self) -> WarmChild | None:
        return self._children.popleft() if self._children else None

    def pids(self) -> set[int]:
        return {child.pid for child in self._children}

    def forget(self, pids: Collection[int]) -> None:
        """Drop the children that died (`pids`, reaped), closing their sockets."""
        for child in [child for child in self._children if child.pid in pids]:
            child.assignment.close()
            self._children.remove(child)

    def close(self) -> None:
        """End of stream for every one: each exits."""
        while self._children:
            self._children.popleft().assignment.close()


@dataclass(frozen=True, kw_only=True)
class IdleChild:
    """A child whose job is over (the supervisor said so: `finished`) and that waits
    for the supervisor to start its next job on its own channel."""

    pid: int
    handler: str
    scratch: str  # the key of its scratch directory (`ScratchRoot`): its last job's id
    cpu_base: float  # its CPU time when its last job ended (the next job's count starts)


class IdleChildren:
    """The fork server's side of reused children between two jobs, by pid.

    The supervisor chooses which idle child runs a job, and retires one idle for too
    long by closing its channel (it exits at the end of stream); here they are only
    known, so that they are neither killed as a job's leftovers nor handed a job
    (`assign`) once gone.
    """

    def __init__(self) -> None:
        self._by_pid: dict[int, IdleChild] = {}

    def put(self, child: IdleChild) -> None:
        self._by_pid[child.pid] = child

    def take(self, pid: int) -> IdleChild | None:
        return self._by_pid.pop(pid, None)

    def pids(self) -> set[int]:
        return set(self._by_pid)

    def forget(self, pids: Collection[int]) -> list[IdleChild]:
        """Drop the children that died (`pids`, reaped); return them."""
        return [child for pid in pids if (child := self._by_pid.pop(pid, None)) is not None]
