"""One value a running job keeps current in the store - the highest note its handler
took, its last checkpoint: each offer replaces the one before, a background task
(started by the first offer, as most jobs make none) writes the newest, retrying
while the store fails, and `flush` tries once more when the job ends.  A write
refused for a stale lease ends the task: the renewal that finds out stops the job."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import anyio

from supervisor.doorbell import Doorbell
from supervisor.errors import StaleToken, StoreFailure
from supervisor.observe.store_failures import StoreFailures

T = TypeVar("T")
# How a job starts a task of its own: its task group's `start_soon`.
StartTask = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class LatestWrite(Generic[T]):
    def __init__(
        self, write: Callable[[T], Awaitable[None]], failures: StoreFailures, start: StartTask
    ) -> None:
        self._write = write
        self._failures = failures
        self._start: StartTask | None = start
        self._latest: T | None = None
        self._offered = 0  # offers so far
        self._written = 0  # the offer count the store has the value of
        self._waiting = Doorbell()

    @property
    def latest(self) -> T | None:
        return self._latest

    @property
    def unwritten(self) -> bool:
        """An offer the store does not have yet (what `flush` would write)."""
        return self._latest is not None and self._offered != self._written

    def offer(self, value: T) -> None:
        self._latest = value
        self._offered += 1
        self._waiting.ring()
        if self._start is not None:
            start, self._start = self._start, None
            start(self._run)

    async def _run(self) -> None:
        while True:
            await self._waiting.wait()
            try:
                await self._write_latest()
            except StoreFailure as error:
                await anyio.sleep(self._failures.failed(error))
                self._waiting.ring()
            except StaleToken:
                return

    async def flush(self) -> None:
        """Write what is not written yet, once, if the store answers."""
        with contextlib.suppress(StoreFailure, StaleToken):
            await self._write_latest()

    async def _write_latest(self) -> None:
        offered, latest = self._offered, self._latest
        if latest is None or offered == self._written:
            return
        await self._write(latest)
        self._failures.succeeded()
        self._written = max(self._written, offered)
