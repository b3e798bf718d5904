"""The jobs this supervisor holds right now, and how to ask one of them to stop."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio

from supervisor import procfs
from supervisor.children import Child, ForkServer
from supervisor.config import HandlerConfig
from supervisor.core.outcome import StopReason
from supervisor.store.base import ClaimedJob, JobStats, Lease

log = logging.getLogger("poolsup.jobs")


@dataclass(eq=False, kw_only=True)
class RunningJob:
    """One claimed job, from claim until its outcome is stored (or abandoned)."""

    claimed: ClaimedJob
    handler: HandlerConfig
    fork_server: ForkServer
    child: Child | None = None
    stop_reason: StopReason | None = None
    stop_wanted: anyio.Event = field(default_factory=anyio.Event)
    notes_waiting: anyio.Event = field(default_factory=anyio.Event)
    killed_after_grace: bool = False
    finalizing: bool = False
    _last_sample: procfs.ProcessSample | None = None

    @property
    def key(self) -> str:
        return self.claimed.key

    @property
    def job_id(self) -> str:
        return str(self.claimed.token)

    @property
    def max_attempts(self) -> int:
        """The job's own limit, or its handler's when it was dispatched without one."""
        return self.claimed.max_attempts or self.handler.max_attempts

    @property
    def lease(self) -> Lease:
        return self.claimed.lease

    @property
    def lease_lost(self) -> bool:
        return self.stop_reason is StopReason.LEASE_LOST

    def request_stop(self, reason: StopReason) -> None:
        """Ask for a stop; the first reason wins, except that a lost lease overrides all."""
        if self.stop_reason is None or reason is StopReason.LEASE_LOST:
            if self.stop_reason is not reason:
                log.info("[%s] stopping: %s", self.key, reason.value)
            self.stop_reason = reason
        self.stop_wanted.set()

    def stats(self) -> JobStats:
        pid = self.child.pid if self.child is not None else None
        if pid is None:
            return JobStats()
        current = procfs.sample(pid)
        if current is None:
            return JobStats(pid=pid)
        previous, self._last_sample = self._last_sample, current
        return JobStats(
            pid=pid,
            rss_bytes=current.rss_bytes,
            cpu_percent=procfs.cpu_percent(previous, current) if previous else None,
        )


class Registry:
    """Jobs by key; a supervisor holds at most one job per key."""

    def __init__(self) -> None:
        self._jobs: dict[str, RunningJob] = {}
        self.changed = anyio.Event()
        self.slot_freed: Callable[[], None] = lambda: None

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def busy_slots(self) -> int:
        """Jobs whose child may still run; a job storing its outcome holds no slot."""
        return sum(1 for job in self._jobs.values() if not job.finalizing)

    def mark_finalizing(self, job: RunningJob) -> None:
        job.finalizing = True
        self.slot_freed()

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(list(self._jobs.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def get(self, key: str) -> RunningJob | None:
        return self._jobs.get(key)

    def add(self, job: RunningJob) -> bool:
        """False if a job of this key is already held (a duplicate start is a no-op)."""
        if job.key in self._jobs:
            return False
        self._jobs[job.key] = job
        return True

    def remove(self, job: RunningJob) -> None:
        if self._jobs.get(job.key) is job:
            del self._jobs[job.key]
        self.changed.set()
        self.changed = anyio.Event()
        self.slot_freed()
