"""Claim work whenever there is room: woken by store events, freed slots, or a poll."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio

from supervisor.core.leases import MAX_LEASE_LOSSES
from supervisor.errors import StoreUnavailable
from supervisor.running import Registry
from supervisor.store.base import ClaimedJob, Store

log = logging.getLogger("poolsup.claimer")

POLL_INTERVAL = 0.5  # also how often expired leases of the pool are recovered
MAX_BACKOFF = 5.0


class Claimer:
    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        owner: str,
        handlers: Sequence[str],
        capacity: int,
        lease_ttl: float,
        start_job: Callable[[ClaimedJob, float], None],
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner
        self.handlers = list(handlers)
        self._capacity = capacity
        self._lease_ttl = lease_ttl
        self._start_job = start_job
        self._wakeup = anyio.Event()
        self.stopped = False

    def wake(self) -> None:
        self._wakeup.set()

    def stop(self) -> None:
        self.stopped = True
        self.wake()

    async def run(self) -> None:
        backoff = 0.1
        while not self.stopped:
            self._wakeup = anyio.Event()
            free = max(0, self._capacity - self._registry.busy_slots)
            sent_at = time.monotonic()
            try:
                batch = await self._store.claim(
                    self._owner, self.handlers, free, self._lease_ttl, MAX_LEASE_LOSSES
                )
            except StoreUnavailable as error:
                log.warning("cannot claim, retrying in %.1f s: %s", backoff, error)
                await self._sleep(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
                continue
            backoff = 0.1
            if batch.recovered:
                log.info("recovered %d job(s) with expired leases", batch.recovered)
            for claimed in batch.jobs:
                self._start_job(claimed, sent_at)
            if batch.jobs and len(batch.jobs) == free:
                continue  # there may be more waiting
            wait = POLL_INTERVAL
            if batch.next_due_in is not None:
                wait = min(wait, max(0.0, batch.next_due_in))
            await self._sleep(wait)

    async def _sleep(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._wakeup.wait()
