"""Which job's step a shared child runs right now, where its fork server can read it
without the child's help: one page of memory shared by the fork server and every child
it forks (made before the first fork), a slot per shared child. A step that allocates
past the memory limit in one C call holds the child's interpreter until it returns, so
the child could not name its job in time; the fork server reads the slot instead and
fails that job for the limit (`sandbox.jobs`)."""

from __future__ import annotations

import mmap

SLOT_SIZE = 64  # a job id (the supervisor's: a token's digits) fits, NUL-padded
SLOTS = 1024

_marks: mmap.mmap | None = None


def make() -> None:
    """In the fork server, before it forks: the shared page every child inherits."""
    global _marks
    if _marks is None:
        _marks = mmap.mmap(-1, SLOT_SIZE * SLOTS, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)


def mark(slot: int, job_id: str) -> None:
    """In a shared child: `job_id`'s step runs from now."""
    if _marks is not None and 0 <= slot < SLOTS:
        data = job_id.encode()[:SLOT_SIZE]
        _marks[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE] = data.ljust(SLOT_SIZE, b"\0")


def clear(slot: int) -> None:
    if _marks is not None and 0 <= slot < SLOTS:
        _marks[slot * SLOT_SIZE] = 0


def read(slot: int) -> str | None:
    """In the fork server: the job whose step the child in `slot` runs, if one does."""
    if _marks is None or not 0 <= slot < SLOTS:
        return None
    data = _marks[slot * SLOT_SIZE:(slot + 1) * SLOT_SIZE].split(b"\0", 1)[0]
    return data.decode(errors="replace") or None


class Slots:
    """The fork server's free slots."""

    def __init__(self) -> None:
        self._free = list(range(SLOTS - 1, -1, -1))

    def take(self) -> int:
        """A free slot; -1 when none is (the child then names no step)."""
        return self._free.pop() if self._free else -1

    def give_back(self, slot: int) -> None:
        if slot >= 0:
            clear(slot)
            self._free.append(slot)
