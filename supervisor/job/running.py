"""The jobs this supervisor holds right now, and how to ask one of them to stop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from sandbox.protocol import fence_clock
from supervisor.config import HandlerConfig
from supervisor.core.admission import Admission, admit_claim
from supervisor.core.outcome import StopReason
from supervisor.doorbell import Doorbell, Latch
from supervisor.forks import procfs
from supervisor.forks.child import Child
from supervisor.forks.fork_client import ForkServerClient
from supervisor.job.stacks import StackRequests, Stacks
from supervisor.observe.job_log import JobLog
from supervisor.store.records import ClaimedJob, JobStats, Lease

log = logging.getLogger("poolsup.jobs")

# How a job's pieces start a task of their own: its task group's `start_soon`.
StartTask = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


@dataclass(frozen=True)
class MoveOrder:
    """Where a job asked to stop for a move goes: released reserved for `target` for
    `reserve_ttl` seconds."""

    target: str
    reserve_ttl: float


@dataclass(eq=False, kw_only=True)
class RunningJob:
    """One claimed job, from claim until its outcome is stored (or abandoned).

    Its state changes only through its methods: the claim is fixed, the child is
    attached once, the fence only moves later, and a stop, once asked for, stays.
    Whoever acts on a change waits for it: `wake` rings when a stop is wanted, a note
    arrives or its child exits (the fork server's client rings it), and the runner
    looks at what changed."""

    claimed: ClaimedJob
    handler: HandlerConfig
    fork_server: ForkServerClient
    fence_at: float  # fence_clock() time by which the lease may have run out in the store
    child: Child | None = None
    stop_reason: StopReason | None = None
    stop_wanted: Latch = field(default_factory=Latch)
    lease_lost_event: Latch = field(default_factory=Latch)
    notes_waiting: Doorbell = field(default_factory=Doorbell)
    wake: Doorbell = field(default_factory=Doorbell)  # for the runner: something changed
    gone: Latch = field(default_factory=Latch)  # left the registry
    killed_after_grace: bool = False
    finalizing: bool = False
    move: MoveOrder | None = None  # set with the stop reason REBALANCE
    claimed_at: float = field(default_factory=fence_clock)
    stack_requests: StackRequests = field(default_factory=StackRequests)
    _last_sample: procfs.ProcessSample | None = None
    log: JobLog = field(init=False, repr=False)  # its lines carry its key and token
    key: str = field(init=False)  # the claim's, read at every step of its way
    token: int = field(init=False)

    def __post_init__(self) -> None:
        self.key, self.token = self.claimed.key, self.claimed.token
        self.log = JobLog(log, self.key, self.token)

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

    def move_to(self, order: MoveOrder) -> None:
        self.move = order
        self.request_stop(StopReason.REBALANCE)

    def notes_arrived(self) -> None:
        """The store holds notes for this run that its child has not been sent."""
        self.notes_waiting.ring()
        self.wake.ring()

    def request_stop(self, reason: StopReason) -> None:
        """Ask for a stop; the first reason wins, except that a lost lease overrides all."""
        if self.stop_reason is None or reason is StopReason.LEASE_LOST:
            if self.stop_reason is not reason:
                self.log.info("stopping: %s", reason.value)
            self.stop_reason = reason
        if reason is StopReason.LEASE_LOST:
            self.lease_lost_event.set()
        if not self.stop_wanted.is_set():
            self.stop_wanted.set()
            self.wake.ring()

    def attach(self, child: Child) -> None:
        """Its child runs.  A fresh child's first sample is its start, at no CPU time
        yet, so that the first renewal can report its CPU use.  A reused child's CPU
        time so far is its earlier jobs' too: its first renewal reads the first sample
        (no CPU use shown yet), rather than every job reading /proc at its start, most
        never renewed."""
        self.child = child
        if self.handler.max_jobs_per_child == 1:
            self._last_sample = procfs.ProcessSample(0, 0.0, time.monotonic())

    async def thread_stacks(self, timeout: float) -> Stacks | None:
        """The child's Python thread stacks (None: no answer within `timeout`)."""
        return await self.stack_requests.ask(
            self.fork_server, self.job_id, timeout,
            on_channel=self.wake if self.handler.child_concurrency > 1 else None)

    def extend_fence(self, deadline: float) -> None:
        """A renewal went through: the lease holds until at least `deadline`."""
        self.fence_at = max(self.fence_at, deadline)

    def killed_at_grace_end(self) -> None:
        self.killed_after_grace = True

    def settling(self) -> None:
        """Its outcome is being stored: it holds no slot any more."""
        self.finalizing = True

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
    """Jobs by token.  A key has at most one run that may start or run a process; an
    older run of the key may still be ending (its lease lost) when a new claim of the
    key arrives, and the new run waits for it (`older_runs`)."""

    def __init__(self, slot_freed: Callable[[], None]) -> None:
        self._jobs: dict[int, RunningJob] = {}
        self._by_key: dict[str, dict[int, RunningJob]] = {}
        self.changed = Doorbell()
        self._slot_freed = slot_freed
        self._finalizing = 0  # held jobs storing their outcome

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def busy_slots(self) -> int:
        """Jobs whose child may still run; a job storing its outcome holds no slot."""
        return len(self._jobs) - self._finalizing

    def mark_finalizing(self, job: RunningJob) -> None:
        if not job.finalizing and self._jobs.get(job.token) is job:
            self._finalizing += 1
        job.settling()
        self._slot_freed()

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(list(self._jobs.values()))

    def get(self, key: str) -> RunningJob | None:
        """The newest run of `key` held here."""
        runs = self._by_key.get(key)
        return runs[max(runs)] if runs else None

    def older_runs(self, job: RunningJob) -> list[RunningJob]:
        runs = self._by_key.get(job.key, {})
        return [other for token, other in runs.items() if token < job.token]

    def add(self, job: RunningJob) -> Admission:
        """Hold `job` unless the decision says it is a duplicate or outdated claim."""
        runs = self._by_key.setdefault(job.key, {})
        admission = admit_claim(runs.keys(), job.token)
        if admission in (Admission.START, Admission.AFTER_OLDER):
            self._jobs[job.token] = runs[job.token] = job
        elif not runs:
            del self._by_key[job.key]
        return admission

    def remove(self, job: RunningJob) -> None:
        if self._jobs.get(job.token) is job:
            del self._jobs[job.token]
            if job.finalizing:
                self._finalizing -= 1
            runs = self._by_key[job.key]
            del runs[job.token]
            if not runs:
                del self._by_key[job.key]
        job.gone.set()
        self.changed.ring()
        if not job.finalizing:  # else its slot was freed when its outcome went out
            self._slot_freed()
