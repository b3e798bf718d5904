"""`exited` events held until what the dead jobs left behind is gone.

A job's daemons come to the fork server when the job's child dies (see
`sandbox.jobs`), and SIGKILL takes effect asynchronously: a process dies only once the
kernel has torn it down. So a job is reported exited only once no leftover (a child
of the fork server that is neither a job nor the child forked ahead) is alive, or
after `HOLD_BOUND` seconds, naming the survivors. Leftovers cannot be told apart by
job, so an exit waits for all of them; a survivor once named holds no later exit.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from sandbox.protocol import Exited

HOLD_BOUND = 5.0


@dataclass(frozen=True, kw_only=True)
class HeldExit:
    event: Exited
    since: float


class ExitHold:
    def __init__(self, bound: float = HOLD_BOUND) -> None:
        self._bound = bound
        self._held: list[HeldExit] = []
        self._named: set[int] = set()

    def __bool__(self) -> bool:
        return bool(self._held)

    def hold(self, event: Exited, now: float) -> None:
        self._held.append(HeldExit(event=event, since=now))

    def next_due(self) -> float | None:
        """When the oldest held event goes out whatever survives, if one is held."""
        return min((held.since + self._bound for held in self._held), default=None)

    def release(self, leftovers: Collection[int], now: float) -> list[Exited]:
        """The events that go out now, with `leftovers` the leftover pids alive now."""
        self._named &= set(leftovers)  # the others were reaped: their pids may be reused
        waiting = sorted(set(leftovers) - self._named)
        if not waiting:
            return self.release_all([])
        due = [held for held in self._held if now >= held.since + self._bound]
        if not due:
            return []
        self._held = [held for held in self._held if now < held.since + self._bound]
        self._named.update(waiting)
        return [replace(held.event, survivors=waiting) for held in due]

    def release_all(self, survivors: Collection[int]) -> list[Exited]:
        """Every held event, naming `survivors` if there are any."""
        released, self._held = self._held, []
        named = sorted(survivors) if survivors else None
        return [replace(held.event, survivors=named) if named else held.event
                for held in released]
