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
    """A child waiting on `assignment` to be handed a job: of any handler, or only of
    `confined_for`, the handler it confined itself for while it waits."""

    pid: int
    assignment: socket.socket
    confined_for: str | None = None


class WarmChildren:
    """The children forked ahead, oldest first, each waiting on its assignment socket.

    Forked `batch` at a time, when none is left for a handler: after each fork the fork
    server copies every page it writes first (the fork shared them all with the new
    child again), so forking several in a row pays for those copies once for all of
    them. Those of a handler confine themselves while they wait, so that its next job
    does not wait for that either; they are kept for the `kept_handlers` handlers
    forked for last, and the others' told to exit, so that a pool of many handlers
    does not keep a batch waiting for each."""

    def __init__(self, batch: int, kept_handlers: int) -> None:
        self.batch = batch
        self.kept_handlers = kept_handlers
        self._children: deque[WarmChild] = deque()

    def add(self, child: WarmChild) -> None:
        self._children.append(child)

    def take(self, handler: str) -> WarmChild | None:
        """The oldest child waiting for a job of `handler`: confined for it, else one
        confined for none; a child confined for another handler never runs it."""
        found = self._for(handler)
        if found is not None:
            self._children.remove(found)
        return found

    def ready_for(self, handler: str | None) -> bool:
        """Whether a child waits that would take a job of `handler` (None: whether one
        forked for no handler waits)."""
        return self._for(handler) is not None

    def _for(self, handler: str | None) -> WarmChild | None:
        unconfined = None
        for child in self._children:
            if child.confined_for == handler:
                return child
            if child.confined_for is None and unconfined is None:
                unconfined = child
        return unconfined

    def keep_latest(self, handler: str | None) -> None:
        """`handler` was forked for last: end the children of the handlers not among the
        `kept_handlers` forked for last (`handler` among them)."""
        order: list[str] = []  # newest first
        for child in reversed(self._children):
            if child.confined_for is not None and child.confined_for not in order:
                order.append(child.confined_for)
        if handler is not None:  # about to be forked for, if it has none
            if handler in order:
                order.remove(handler)
            order.insert(0, handler)
        kept = set(order[:self.kept_handlers])
        for child in [child for child in self._children
                      if child.confined_for is not None and child.confined_for not in kept]:
            child.assignment.close()  # end of stream: it exits
            self._children.remove(child)

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
