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
