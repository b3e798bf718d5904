"""The fork server's running jobs: their fences, their limits, their ends.

Each job's child is the leader of its own session and process group, and a
subreaper; the fork server is a subreaper too. So a process a job leaves behind (a
daemon that called setsid, a double-forked grandchild) comes to the fork server when
the job's child dies, and `reap` kills every child that is neither a job nor a spare
(`sandbox.spares`); a job's `exited` event waits until they are gone
(`sandbox.leftovers`).

A child of a handler with max_jobs_per_child > 1 may outlive its job: once it reports
the job done and itself clean (`sandbox.reuse`) to the supervisor, which tells us
(`finished`), `finish` ends the job, and the child waits, a spare, for the next.
Everything here is per job, keyed by job id: fences, limits (CPU counted from the
job's start), signals.

A shared child (an async handler with child_concurrency > 1, `sandbox.shared`) holds
several jobs at once, each fenced on its own; their child's limits are one watch. The
child reports each job's end (`ended`); a job whose fence passes unreported, or that
goes over a limit, or is killed, takes the whole child with it, and the child's other
jobs exit `killed_for` that job, which releases them without spending an attempt.
"""

from __future__ import annotations

import contextlib
import heapq
import os
import signal
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sandbox import linux, proctree, protocol
from sandbox.leftovers import ExitHold
from sandbox.limits import TreeWatch, cpu_reason, format_size, memory_reason, slow_interval
from sandbox.loader import HandlerSpec
from sandbox.stacks import STACKS_SIGNAL

# How long a shared child over a limit has to name the job that took it there (after the
# step that took it there: sandbox.shared) before all its jobs die unblamed.
BLAME_WAIT = 0.05


@dataclass(eq=False, kw_only=True)
class ForkedJob:
    job_id: str
    pid: int  # also its process group and session id
    handler: str = ""
    cpu_limit: float | None = None
    cpu_base: float = 0.0  # the child's CPU time when the job started (a reused child's)
    signalled: bool = False  # a signal or kill was sent to the job: its child is not reused
    watch: TreeWatch | None = None  # when it has a memory or CPU limit
    deadline: float | None = None
    fenced: bool = False
    reason: str | None = None  # why the fork server ended it, if it did
    shared: bool = False  # its child runs other jobs at once (child_concurrency > 1)
    killed_for: str | None = None  # its shared child was killed on another job's account
    over: bool = False  # its shared child named it for going over its memory limit

    @property
    def ending(self) -> bool:
        """The fork server is killing its child: only the reap reports its end."""
        return self.fenced or self.reason is not None or self.killed_for is not None


class Jobs:
    def __init__(self, stepping: Callable[[int], str | None] = lambda pid: None) -> None:
        # The job whose step the shared child `pid` runs now, if it says (step_marks).
        self._stepping = stepping
        self._by_id: dict[str, ForkedJob] = {}
        self._by_pid: dict[int, dict[str, ForkedJob]] = {}  # a shared child's: several
        self._fences: list[tuple[float, str]] = []  # a heap; stale entries are skipped
        self._hold = ExitHold()
        # Shared children over a limit, waiting (until when) for the child to name the job
        # whose step took it there, and the reason.
        self._blame_waits: dict[int, tuple[float, str]] = {}

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_id

    def __bool__(self) -> bool:
        return bool(self._by_id)

    def get(self, job_id: str) -> ForkedJob | None:
        return self._by_id.get(job_id)

    def add(
        self, job_id: str, pid: int, spec: HandlerSpec, now: float, *, handler: str = "",
        cpu_base: float = 0.0,
    ) -> ForkedJob:
        job = ForkedJob(
            job_id=job_id, pid=pid, handler=handler, cpu_limit=spec.cpu_limit, cpu_base=cpu_base,
            shared=spec.child_concurrency > 1,
        )
        siblings = self._by_pid.setdefault(pid, {})
        if siblings:  # a shared child's: its limits are the child's, watched once
            job.watch = next(iter(siblings.values())).watch
        elif spec.memory_limit is not None or spec.cpu_limit is not None:
            job.watch = TreeWatch(
                memory_limit=spec.memory_limit, cpu_limit=spec.cpu_limit, cpu_base=cpu_base,
                due=now,
            )
        self._by_id[job_id] = job
        siblings[job_id] = job
        return job

    def jobs_in(self, pid: int) -> int:
        """How many jobs the child `pid` runs now."""
        return len(self._by_pid.get(pid, ()))

    def ending_child(self, pid: int) -> bool:
        """Whether the fork server is killing the child `pid` for one of its jobs."""
        return any(job.ending for job in self._by_pid.get(pid, {}).values())

    def signal(self, job_id: str, signum: int) -> None:
        """Signal the job's process group (a graceful stop reaches only that)."""
        job = self._by_id.get(job_id)
        if job is not None and not job.shared:  # a shared child's job: cancelled by its child
            job.signalled = True
            _signal_group(job.pid, signum)

    def ask_stacks(self, job_id: str) -> None:
        """Ask the job's own process (not its group) for its thread stacks."""
        job = self._by_id.get(job_id)
        if job is not None and not job.shared:  # a shared child answers on the job's channel
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(job.pid, STACKS_SIGNAL)

    def kill(self, job_id: str) -> None:
        """SIGKILL the job's whole process tree."""
        job = self._by_id.get(job_id)
        if job is not None:
            job.signalled = True
            self._kill_child(job, "was killed after its stop_grace")

    def kill_all(self) -> None:
        for pid in self._by_pid:
            proctree.kill_tree(pid)

    def _kill_child(self, job: ForkedJob, why: str) -> None:
        """Kill `job`'s child and all in it; a shared child's other jobs die `killed_for`
        it (unless already ending on their own account)."""
        for sibling in self._by_pid.get(job.pid, {}).values():
            if sibling is not job and not sibling.ending:
                sibling.killed_for = f"the job of token {job.job_id} {why}"
        proctree.kill_tree(job.pid)

    def next_due(self) -> float | None:
        """When a fence or a limit sample is next due (on the fence clock), if ever."""
        dues = [
            job.watch.due
            for job in self._by_id.values()
            if job.watch is not None and not job.ending  # a killed job waits for reap
        ]
        if self._fences:
            dues.append(self._fences[0][0])
        if (held_until := self._hold.next_due()) is not None:
            dues.append(held_until)
        dues.extend(until for until, _ in self._blame_waits.values())
        return min(dues, default=None)

    # -- fences

    def set_fence(self, job_id: str, deadline: float) -> None:
        job = self._by_id.get(job_id)
        if job is not None:
            job.deadline = deadline
            heapq.heappush(self._fences, (deadline, job_id))

    def enforce_fences(self, now: float) -> None:
        while self._fences and self._fences[0][0] <= now:
            _, job_id = heapq.heappop(self._fences)
            job = self._by_id.get(job_id)
            if job is None or job.fenced or job.deadline is None or job.deadline > now:
                continue
            job.fenced = True
            self._kill_child(job, "passed its fence")

    # -- limits

    def enforce_limits(self, now: float) -> None:
        watched = {id(job.watch): (job, job.watch) for job in self._by_id.values()
                   if job.watch is not None and not job.ending}  # a shared child's once
        slowest = slow_interval(len(watched))
        for job, watch in watched.values():
            if watch.due > now:
                continue
            reason = watch.observe(proctree.usage(job.pid), now, slowest)
            if reason is not None:
                self._over_limit(job.pid, reason, now)
        for pid, (until, reason) in list(self._blame_waits.items()):
            if until <= now:
                self._over_limit(pid, reason, now)

    def over_limit(self, job_id: str) -> None:
        """A shared child names the job whose step took it over its memory limit: the
        limit's kill, now or when the watch sees it, is that job's."""
        job = self._by_id.get(job_id)
        if job is not None and job.shared and not job.ending:
            job.over = True
            if job.watch is not None and job.watch.memory_limit is not None:
                limit, peak = job.watch.memory_limit, job.watch.peak_rss
                _, reason = self._blame_waits.get(job.pid, (0.0, None))
                self._over_limit(job.pid, reason or (
                    memory_reason(limit, peak) if peak > limit
                    else f"memory limit {format_size(limit)} exceeded"), None)

    def _over_limit(self, pid: int, reason: str, now: float | None) -> None:
        """End the child `pid` for `reason`: the job of its own (or the one its shared
        child named) fails for it, the others are released. A shared child that named
        none yet is given BLAME_WAIT to (from `now`; None: no more); then, naming none,
        all its jobs are released."""
        jobs = list(self._by_pid.get(pid, {}).values())
        stepping = self._stepping(pid) if len(jobs) > 1 else None
        blamed = ([job for job in jobs if job.over]
                  or [job for job in jobs if job.job_id == stepping]
                  or (jobs if len(jobs) == 1 else []))
        if not blamed and now is not None:
            until, _ = self._blame_waits.setdefault(pid, (now + BLAME_WAIT, reason))
            if now < until:
                return
        self._blame_waits.pop(pid, None)
        for job in blamed[:1]:
            job.reason = reason
            self._kill_child(job, f"went over its limit: {reason}")
        if not blamed:
            for job in jobs:
                job.killed_for = (f"its shared child of {len(jobs)} jobs was killed: {reason}"
                                  " (by no one job that it could tell)")
            proctree.kill_tree(pid)

    # -- ends

    def finish(self, job_id: str) -> protocol.Exited | None:
        """The `exited` event of a job whose child, alive, reported it done and itself
        clean; None if the job is being killed (a fence, a limit): its reap reports it."""
        return self.ended(job_id, 0)

    def ended(self, job_id: str, code: int) -> protocol.Exited | None:
        """The `exited` event of a job that ended in its child, which lives on (a reused
        child's "done", a shared child's report); None if the job is being killed: its
        reap reports it."""
        job = self._by_id.get(job_id)
        if job is None or job.ending:
            return None
        del self._by_id[job_id]
        siblings = self._by_pid[job.pid]
        del siblings[job_id]
        if not siblings:
            del self._by_pid[job.pid]
        return protocol.Exited(job=job_id, pid=job.pid, code=code, signal=None, fenced=False)

    def reap(
        self, spares: Collection[int], now: float
    ) -> tuple[list[protocol.Exited], set[int]]:
        """Reap every child that has exited and kill what jobs left behind.

        Returns the `exited` events of jobs whose leftovers are gone (or held for too
        long), and which of the children waiting for a job (`spares`) died.
        """
        events: list[protocol.Exited] = []
        dead_spares: set[int] = set()
        reaped = False
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                break
            if info is None:
                break
            jobs = self._by_pid.pop(info.si_pid, None)
            self._blame_waits.pop(info.si_pid, None)
            if jobs:
                # While the leader is a zombie its group id cannot be reused: kill the
                # helpers it left in its group before reaping it.
                _signal_group(info.si_pid, signal.SIGKILL)
            _, status, rusage = os.wait4(info.si_pid, 0)
            reaped = True
            if jobs:
                for job in jobs.values():
                    cpu_seconds = rusage.ru_utime + rusage.ru_stime - job.cpu_base
                    self._hold.hold(self._exited(job, status, cpu_seconds), now)
            if info.si_pid in spares:
                dead_spares.add(info.si_pid)
        if reaped or self._hold:
            leftovers = self._kill_leftovers(set(spares) - dead_spares)
            events = self._hold.release(leftovers, now)
        return events, dead_spares

    def release_held(self, spares: Collection[int]) -> list[protocol.Exited]:
        """Every `exited` event still held, naming the leftovers still alive."""
        return self._hold.release_all(self._leftovers(spares))

    def _exited(self, job: ForkedJob, status: int, cpu_seconds: float) -> protocol.Exited:
        del self._by_id[job.job_id]
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        reason = job.reason
        if reason is None and job.cpu_limit is not None and _by_rlimit_cpu(
            signum, job.cpu_limit, cpu_seconds
        ):
            reason = cpu_reason(job.cpu_limit)
        return protocol.Exited(
            job=job.job_id,
            pid=job.pid,
            code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            signal=signum,
            fenced=job.fenced,
            reason=reason,
            killed_for=job.killed_for,
        )

    def _kill_leftovers(self, spares: Collection[int]) -> list[int]:
        """Kill our children that are neither jobs nor `spares`; return them.

        Jobs are subreapers, so while a job lives its orphaned descendants are its
        children; a process that comes to us is what a dead job left behind. Killed
        again on every pass until it is gone: what it forked meanwhile comes to us too.
        """
        leftovers = self._leftovers(spares)
        for pid in leftovers:
            proctree.kill_tree(pid)
        return leftovers

    def _leftovers(self, spares: Collection[int]) -> list[int]:
        return [pid for pid in linux.child_pids() if pid not in self._by_pid and pid not in spares]


def _by_rlimit_cpu(signum: int | None, limit: float, cpu_seconds: float) -> bool:
    """Whether the kernel ended a process for RLIMIT_CPU: SIGXCPU at the soft limit, or
    SIGKILL at the hard one for a process that caught SIGXCPU."""
    if signum == signal.SIGXCPU:
        return True
    return signum == signal.SIGKILL and cpu_seconds >= limit


def _signal_group(pid: int, signum: int) -> None:
    """Signal a job's process group; or, before the child made its group, the child."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        # Nothing else can be in its group yet, and its pid, our unreaped child's,
        # cannot have been reused.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)
    except PermissionError:
        pass
