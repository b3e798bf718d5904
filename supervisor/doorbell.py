"""A wake-up that may ring many times, for a loop that waits for work."""

from __future__ import annotations

import anyio


class Doorbell:
    """A wake-up that may ring many times: `wait` returns once it rang since the last
    `wait` returned.  One waiter at a time.  Its event is made only for a wait that
    must sleep: most of a job's doorbells are never waited on, or ring first."""

    def __init__(self) -> None:
        self._rang = False
        self._waiter: anyio.Event | None = None

    @property
    def rang(self) -> bool:
        return self._rang

    def ring(self) -> None:
        self._rang = True
        if self._waiter is not None:
            self._waiter.set()

    async def wait(self) -> None:
        if not self._rang:
            self._waiter = anyio.Event()
            try:
                await self._waiter.wait()
            finally:
                self._waiter = None
        self._rang = False


class Latch:
    """A wake-up that rings once, for good (an `anyio.Event`'s `set`, `is_set` and
    `wait`): its event is made only for a wait that must sleep, as most of a job's
    latches (its stop, its lost lease, its child's exit) are only looked at, or set
    before anyone waits.  A wait on a latch already set returns at once, without a trip
    through the event loop."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    async def wait(self) -> None:
        if self._set:
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
