"""A wake-up that may ring many times, for a loop that waits for work; one that rings
once.  Both wait on asyncio's own future or event, not anyio's `Event` (whose
construction looks up the running backend, some ten calls a time, a few times a job):
the supervisor runs on asyncio only (redis.asyncio), and a cancelled wait raises
`CancelledError` into anyio's cancel scopes as anyio's own event would."""

from __future__ import annotations

import asyncio


class Doorbell:
    """A wake-up that may ring many times: `wait` returns once it rang since the last
    `wait` returned.  One waiter at a time.  Its event is made only for a wait that
    must sleep: most of a job's doorbells are never waited on, or ring first."""

    def __init__(self) -> None:
        self._rang = False
        self._waiter: asyncio.Future[None] | None = None

    @property
    def rang(self) -> bool:
        return self._rang

    def ring(self) -> None:
        self._rang = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():  # done: its wait was cancelled
            waiter.set_result(None)

    async def wait(self) -> None:
        if not self._rang:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        self._rang = False


class Latch:
    """A wake-up that rings once, for good (an event's `set`, `is_set` and
    `wait`): its event is made only for a wait that must sleep, as most of a job's
    latches (its stop, its lost lease, its child's exit) are only looked at, or set
    before anyone waits.  A wait on a latch already set returns at once, without a trip
    through the event loop."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: asyncio.Event | None = None  # one future per waiter: one waiter's
        # cancellation cancels its own, not the others'

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
            self._event = asyncio.Event()
        await self._event.wait()
