"""Renew every held lease in one round trip, move the fence, kill what was lost."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import anyio

from supervisor.children import ForkServer
from supervisor.core.leases import fence_deadline, renew_interval, renewal_lag
from supervisor.core.outcome import StopReason
from supervisor.errors import StoreUnavailable
from supervisor.running import Registry
from supervisor.store.base import Store

log = logging.getLogger("poolsup.leases")


@dataclass(kw_only=True)
class RenewalStats:
    """Counters for status and benchmarks."""

    renewals: int = 0
    failures: int = 0
    leases_lost: int = 0
    lags: list[float] = field(default_factory=list)

    def record_lag(self, lag: float) -> None:
        self.lags.append(lag)
        if len(self.lags) > 10_000:
            del self.lags[:5_000]


class LeaseKeeper:
    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        owner: str,
        lease_ttl: float,
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner
        self._lease_ttl = lease_ttl
        self.stats = RenewalStats()
        self._store_down_since: float | None = None

    async def run(self) -> None:
        interval = renew_interval(self._lease_ttl)
        next_at = time.monotonic()
        while True:
            next_at += interval
            await anyio.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - next_at > interval:
                next_at = time.monotonic()  # we were frozen: don't burst to catch up
            await self.renew_once(expected_at=next_at)

    async def renew_once(self, *, expected_at: float | None = None) -> None:
        jobs = list(self._registry)
        leases = [job.lease for job in jobs]
        stats = {job.key: job.stats() for job in jobs}
        sent_at = time.monotonic()
        if expected_at is not None:
            self.stats.record_lag(renewal_lag(expected_at, sent_at))
        try:
            with anyio.fail_after(renew_interval(self._lease_ttl)):
                result = await self._store.renew(self._owner, leases, self._lease_ttl, stats)
        except (StoreUnavailable, TimeoutError) as error:
            self.stats.failures += 1
            if self._store_down_since is None:
                self._store_down_since = sent_at
                log.warning("lease renewal failed, children will be fenced: %s", error or "timeout")
            return
        if self._store_down_since is not None:
            log.info("lease renewal works again after %.1f s", sent_at - self._store_down_since)
            self._store_down_since = None
        self.stats.renewals += 1
        deadline = fence_deadline(sent_at, self._lease_ttl)
        held_by_server: dict[ForkServer, list[str]] = {}
        for job in jobs:
            if job.key not in result.lost and job.child is not None:
                held_by_server.setdefault(job.fork_server, []).append(job.job_id)
        for fork_server, job_ids in held_by_server.items():
            await fork_server.fence(job_ids, deadline)
        for job in jobs:
            if job.key in result.lost:
                if job.finalizing:
                    continue  # its outcome went in while this renewal was in flight
                self.stats.leases_lost += 1
                log.warning("[%s] lease lost (token %d)", job.key, job.claimed.token)
                job.request_stop(StopReason.LEASE_LOST)
            elif job.key in result.stop_requested:
                job.request_stop(StopReason.USER)
            if job.key in result.notified:
                job.notes_waiting.set()
