"""Children waiting for a job: the one forked ahead, and those that ran a job of a
handler with max_jobs_per_child > 1 and wait, on their own channel to the supervisor,
for the next job of that handler."""

from __future__ import annotations

import socket
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(eq=False, kw_only=True)
class WarmChild:
    """A child waiting on `assignment` to be handed a job."""

    pid: int
    assignment: socket.socket


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
