"""Turns at a store's few connections: calls in order of arrival, except that a call that
goes `first` (a lease renewal) takes the next free one whatever waits. A host whose 1,000
jobs end at once queues 1,000 completions; a renewal behind them came after the fences,
and the jobs still running were killed for it."""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator

import anyio


class Turns:
    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiting: list[tuple[int, int, anyio.Event]] = []  # a heap: (rank, arrival, turn)
        self._arrivals = itertools.count()

    @contextlib.asynccontextmanager
    async def turn(self, *, first: bool = False) -> AsyncIterator[None]:
        await self._take(first)
        try:
            yield
        finally:
            self._give_back()

    async def _take(self, first: bool) -> None:
        if self._free and not self._waiting:
            self._free -= 1
            return
        turn = anyio.Event()
        entry = (0 if first else 1, next(self._arrivals), turn)
        heapq.heappush(self._waiting, entry)
        try:
            await turn.wait()
        except BaseException:
            if turn.is_set():
                self._give_back()  # handed over as it was cancelled
            else:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            raise

    def _give_back(self) -> None:
        if self._waiting:
            heapq.heappop(self._waiting)[2].set()  # the slot is handed over, not freed
        else:
            self._free += 1
