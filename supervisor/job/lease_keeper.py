"""Renew every held lease in one round trip, move the fence, kill what was lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

import anyio

from sandbox.protocol import fence_clock
from supervisor.core.leases import fence_deadline, renew_interval, renewal_lag
from supervisor.core.outcome import StopReason
from supervisor.doorbell import Doorbell
from supervisor.errors import StoreFailure
from supervisor.forks.fork_client import ForkServerClient, ForkServerDied
from supervisor.job.running import Registry
from supervisor.observe.job_log import JobLog
from supervisor.observe.metrics import metrics
from supervisor.observe.store_failures import StoreFailures
from supervisor.store.base import Store
from supervisor.store.records import JobStats, MembershipState

log = logging.getLogger("poolsup.leases")

EARLY_RENEWAL_DELAY = 0.05


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
        instance: str,
        lease_ttl: float,
        on_membership: Callable[[MembershipState], None],
    ) -> None:
        self._store = store
        self._registry = registry
        self._owner = owner
        self._instance = instance
        self._lease_ttl = lease_ttl
        self._on_membership = on_membership
        self.stats = RenewalStats()
        self.failures = StoreFailures("lease renewal")
        self._wake = Doorbell()  # an early renewal came due, or the wait's timer ran out
        self._soon: asyncio.TimerHandle | None = None  # looks for a job to show early
        self._later = False  # a job started after that timer was set
        self._early_due = False
        self._shown: frozenset[int] = frozenset()  # tokens the last renewal showed a pid of

    def renew_soon(self) -> None:
        """Renew EARLY_RENEWAL_DELAY after a job's start rather than at the next tick, so
        that a job that runs that long soon shows its pid (several starts share one
        renewal); a job over by then (a short one) needs none.  A timer looks, and wakes
        the keeper only for a renewal due: a busy supervisor of short jobs pays a timer
        per EARLY_RENEWAL_DELAY, not a wake-up per job."""
        if self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(EARLY_RENEWAL_DELAY,
                                                               self._look)
        else:
            self._later = True  # looked at by the next timer

    def _look(self) -> None:
        self._soon = None
        due, unreported = self._unshown(started_by=fence_clock() - EARLY_RENEWAL_DELAY)
        if due:
            self._early_due = True
            self._wake.ring()
        if self._later or unreported:
            self._later = False
            self.renew_soon()

    def _unshown(self, started_by: float) -> tuple[bool, bool]:
        """Whether a job claimed by `started_by` runs a child whose pid no renewal has
        shown yet; and whether one runs a child whose pid the fork server has not
        reported yet (a busy host's report can come after this look: look again)."""
        due = unreported = False
        for job in self._registry:
            child = job.child
            if child is None or job.finalizing or job.lease_lost:
                continue
            if child.pid is None:
                unreported = True
            elif job.claimed_at <= started_by and job.token not in self._shown:
                due = True
        return due, unreported

    async def run(self) -> None:
        interval = renew_interval(self._lease_ttl)
        next_at = fence_clock()
        while True:
            next_at += interval
            while (remaining := next_at - fence_clock()) > 0:
                if not await self._early_within(remaining):
                    break
                await self.renew_once()
            if fence_clock() - next_at > interval:
                next_at = fence_clock()  # we were frozen: don't burst to catch up
            await self.renew_once(expected_at=next_at)

    async def _early_within(self, seconds: float) -> bool:
        """Whether an early renewal came due within `seconds` (a timer that rings the
        keeper's doorbell, not a cancel scope)."""
        timer = asyncio.get_running_loop().call_later(seconds, self._wake.ring)
        try:
            await self._wake.wait()
        finally:
            timer.cancel()
        due, self._early_due = self._early_due, False
        return due

    async def renew_once(self, *, expected_at: float | None = None) -> None:
        # A run whose lease is lost is only ending: the store has moved on from it.
        jobs = [job for job in self._registry if not job.lease_lost]
        leases = [job.lease for job in jobs]
        stats = {job.key: job.stats() for job in jobs}
        sent_at = fence_clock()
        if expected_at is not None:
            lag = renewal_lag(expected_at, sent_at)
            self.stats.record_lag(lag)
            metrics.renewal_lag.observe(lag)
        _record_children(stats)
        try:
            with anyio.fail_after(renew_interval(self._lease_ttl)):
                result = await self._store.renew(
                    self._owner, self._instance, leases, self._lease_ttl, stats
                )
        except (StoreFailure, TimeoutError) as error:
            # Children are fenced by the fork server, whatever happens here.
            self.stats.failures += 1
            metrics.renewals.labels("failed").inc()
            self.failures.failed(error)
            return
        self.failures.succeeded()
        self._shown = frozenset(job.token for job in jobs if stats[job.key].pid is not None)
        self.stats.renewals += 1
        metrics.renewals.labels("ok").inc()
        deadline = fence_deadline(sent_at, self._lease_ttl)
        held_by_server: dict[ForkServerClient, list[str]] = {}
        for job in jobs:
            if (job.key, job.token) in result.lost:
                continue
            job.extend_fence(deadline)
            if job.child is not None:
                held_by_server.setdefault(job.fork_server, []).append(job.job_id)
        for fork_server, job_ids in held_by_server.items():
            # A dead fork server took its children with it; it is replaced elsewhere.
            with suppress(ForkServerDied):
                await fork_server.fence(job_ids, deadline)
        for job in jobs:
            if (job.key, job.token) in result.lost:
                if job.finalizing:
                    continue  # its outcome went in while this renewal was in flight
                self.stats.leases_lost += 1
                metrics.leases_lost.inc()
                JobLog(log, job.key, job.token).warning("lease lost")
                job.request_stop(StopReason.LEASE_LOST)
                continue  # a key's stop and notes are for its run that holds the lease
            if job.key in result.stop_requested:
                job.request_stop(StopReason.USER)
            if job.key in result.notified:
                job.notes_arrived()
        if result.membership != "ok":
            self._on_membership(result.membership)


def _record_children(stats: dict[str, JobStats]) -> None:
    # By pid: the jobs of a shared child (child_concurrency) show its one process each.
    running = list({job.pid: job for job in stats.values() if job.pid is not None}.values())
    metrics.running_children.set(len(running))
    metrics.children_rss.set(sum(job.rss_bytes or 0 for job in running))
    metrics.children_cpu.set(sum(job.cpu_percent or 0.0 for job in running))
