"""A wake-up that may ring many times, for a loop that waits for work."""

from __future__ import annotations

import anyio


class Doorbell:
    """A wake-up that may ring many times: `wait` returns once it rang since the last
    `wait` returned.  One waiter at a time."""

    def __init__(self) -> None:
        self._rung = anyio.Event()

    @property
    def rang(self) -> bool:
        return self._rung.is_set()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        await self._rung.wait()
        self._rung = anyio.Event()
