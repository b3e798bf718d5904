"""What a job inherits of its process and may change for the next job of a reused child
(`sandbox.reuse`): niceness, scheduling policy, CPU affinity and every resource limit.

Captured once the child is confined for its first job (`sandbox.confinement.apply` sets
some of them), put back after each job. Each is put back if the kernel lets this process
do it, else the child is retired: which depends on its privilege, not on the attribute.
A child running as root (or with CAP_SYS_NICE, CAP_SYS_RESOURCE) can put back all. An
unprivileged one can raise its nice, soften a soft limit up to its hard limit, lower a
hard limit and set its affinity again, but cannot lower its nice, leave SCHED_IDLE (or
SCHED_BATCH with a nice RLIMIT_NICE forbids), or raise a hard limit: then it retires.

Nice, policy and affinity are per thread on Linux: these are the main thread's, where
jobs run (a child whose job left a thread is retired anyway).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

_RLIMIT_NAMES = {
    getattr(resource, name): name for name in sorted(dir(resource)) if name.startswith("RLIMIT_")
}
_INFINITY = resource.RLIM_INFINITY

Limit = tuple[int, int]  # soft, hard


@dataclass(frozen=True, kw_only=True)
class ProcessState:
    """The state a reused child's first job started in."""

    nice: int
    policy: int
    priority: int  # the static priority of a real-time policy, else 0
    affinity: frozenset[int]
    rlimits: dict[int, Limit]  # resource: (soft, hard)

    @classmethod
    def capture(cls) -> ProcessState:
        return cls(
            nice=os.getpriority(os.PRIO_PROCESS, 0),
            policy=os.sched_getscheduler(0),
            priority=os.sched_getparam(0).sched_priority,
            affinity=frozenset(os.sched_getaffinity(0)),
            rlimits={number: resource.getrlimit(number) for number in _RLIMIT_NAMES},
        )

    def restore(self) -> str | None:
        """Put back what the last job changed; why this process cannot run another job,
        if something could not be put back."""
        for number, wanted in self.rlimits.items():
            reason = _restore_rlimit(number, wanted)
            if reason is not None:
                return reason
        # The policy before the nice: leaving SCHED_IDLE is judged by the nice it has.
        policy, priority = os.sched_getscheduler(0), os.sched_getparam(0).sched_priority
        if (policy, priority) != (self.policy, self.priority):
            try:
                os.sched_setscheduler(0, self.policy, os.sched_param(self.priority))
            except OSError as error:
                return f"its job changed its scheduling policy, which cannot be put back: {error}"
        if os.getpriority(os.PRIO_PROCESS, 0) != self.nice:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, self.nice)
            except OSError as error:
                return f"its job changed its nice, which cannot be put back to {self.nice}: {error}"
        if os.sched_getaffinity(0) != self.affinity:
            try:
                os.sched_setaffinity(0, self.affinity)
            except OSError as error:
                return f"its job changed its CPU affinity, which cannot be put back: {error}"
        return None


def _restore_rlimit(number: int, wanted: Limit) -> str | None:
    current = resource.getrlimit(number)
    soft, hard = wanted
    if number == resource.RLIMIT_CPU and soft != _INFINITY:
        # A finite soft RLIMIT_CPU is a CPU budget over the child's whole life, granted
        # again at each job's start (`sandbox.confinement.renew`): put back as it was at
        # the first job, it could be below the CPU time used since, and end the child.
        soft = current[0] if _at_most(current[0], hard) else hard
    if (soft, hard) == current:
        return None
    try:
        resource.setrlimit(number, (soft, hard))
    except (OSError, ValueError) as error:  # ValueError: not allowed to raise the hard limit
        return (f"its job changed {_RLIMIT_NAMES[number]} to {current}, which cannot be put "
                f"back to {(soft, hard)}: {error}")
    return None


def _at_most(soft: int, hard: int) -> bool:
    return hard == _INFINITY or (soft != _INFINITY and soft <= hard)
