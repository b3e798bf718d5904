"""A child that ran a job, made clean for the next job of its handler.

With `max_jobs_per_child = N` (N > 1) a child runs up to N jobs of one handler, one
after another. After each job that ended normally (its result or error was sent), the
child, not the fork server, makes itself clean before it tells the supervisor, on its
control socket, that it is free (`sandbox.child`): it kills and reaps every process the
job left (as a subreaper, whatever the job started, a daemon that called setsid
included, is in its tree), puts back its signal handlers, signal mask, umask and
interval timers as they were before its first job, takes every signal left pending for
the job (queued real-time signals included), puts back its nice, scheduling policy, CPU
affinity and resource limits as its first job found them (`sandbox.process_state`),
and, at the next job's start, its environment and working directory
(`sandbox.confinement.renew`). What it cannot put back, it retires for:
`retire_reason`, or the reason a restore gives.

A child that waits longer than `supervisor.forks.idle_children.IDLE_LIMIT` for its next
job is retired by the supervisor (it closes the child's sockets): it exits, and the
next job gets a fresh child.

What a clean child keeps from one job to the next is what a Python process keeps:
imported modules and their globals (caches, connections), open files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass

from sandbox import proctree, raw_signal

# A child whose resident memory after a job is above this share of its handler's
# memory_limit is retired rather than reused (like Celery's max_memory_per_child): the
# next job would start near its limit.
RSS_WATERMARK = 0.75
LEFTOVERS_BOUND = 1.0  # seconds to kill and reap what a job left, else retire
# Signals taken between two jobs before retiring instead: a queue of real-time signals is
# bounded by RLIMIT_SIGPENDING, but a process may keep sending more.
MOST_PENDING_SIGNALS = 100_000
_TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
_ALL_SIGNALS = frozenset(int(signum) for signum in signal.valid_signals())


@dataclass(frozen=True, kw_only=True)
class Pristine:
    """What a child was like before its first job."""

    threads: int
    cwd_fd: int  # the working directory, held open (O_PATH)
    umask: int
    signal_mask: frozenset[int]
    handlers: dict[int, raw_signal.Handler]  # signal number: handler, those Python can set

    @classmethod
    def capture(cls) -> Pristine:
        umask = os.umask(0)
        os.umask(umask)
        handlers: dict[int, raw_signal.Handler] = {}
        for signum in _ALL_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                handler = raw_signal.getsignal(signum)
                if handler is not None:
                    handlers[signum] = handler
        return cls(
            threads=threading.active_count(),
            cwd_fd=os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC),
            umask=umask,
            signal_mask=frozenset(raw_signal.pthread_sigmask(signal.SIG_BLOCK, [])),
            handlers=handlers,
        )

    def restore(self) -> str | None:
        """Signal handlers, signal mask, umask and timers as they were; pending signals
        are the job's: none survives to the next job. Why this process cannot run
        another job, if a signal could not be taken (it stays blocked then)."""
        for timer in _TIMERS:
            signal.setitimer(timer, 0)
        raw_signal.pthread_sigmask(signal.SIG_BLOCK, _ALL_SIGNALS)
        for signum, handler in self.handlers.items():
            if raw_signal.getsignal(signum) != handler:  # most jobs change none
                with contextlib.suppress(ValueError, OSError):
                    raw_signal.set_handler(signum, handler)
        if not discard_pending_signals():
            return "signals kept arriving for its job"
        raw_signal.pthread_sigmask(signal.SIG_SETMASK, self.signal_mask)
        os.umask(self.umask)
        return None


def discard_pending_signals(most: int = MOST_PENDING_SIGNALS) -> bool:
    """Take every pending signal (all are blocked by the caller), so that a signal meant
    for the last job does not reach the next one: real-time signals queue, one taken at
    a time. False if more than `most` were taken and some are still pending."""
    taken = 0
    while pending := raw_signal.sigpending():
        took = taken
        for signum in pending:
            with contextlib.suppress(OSError):
                while raw_signal.take_pending(signum):
                    taken += 1
                    if taken > most:
                        return False
        if taken == took:  # pending, yet none could be taken
            return False
    return True


def end_descendants(bound: float = LEFTOVERS_BOUND) -> bool:
    """SIGKILL and reap every process below this one; False if some outlived `bound`.

    Killed again on every pass: a process forked after a walk of the tree comes to us
    (we are a subreaper) once its parent is dead.
    """
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        # No child, so no descendant: an orphan below a subreaper becomes its child.
        # Most jobs start none, and /proc need not be walked (some 30 us).
        return True
    me = os.getpid()
    deadline = time.monotonic() + bound
    while True:
        for pid in reversed(proctree.tree(me)[1:]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)


def resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as file:
        return int(file.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def retire_reason(
    *,
    exit_code: int,
    stop_seen: bool,
    leftovers_gone: bool,
    extra_threads: int,
    rss: int,
    memory_limit: int | None,
) -> str | None:
    """Why a child that ran a job must not run another, if it must not."""
    if exit_code != 0:
        return f"its job ended with exit code {exit_code}"
    if stop_seen:
        return "its job was asked to stop"
    if not leftovers_gone:
        return "processes its job left survived SIGKILL"
    if extra_threads > 0:
        return f"its job left {extra_threads} thread(s) running"
    if memory_limit is not None and rss > RSS_WATERMARK * memory_limit:
        return f"its memory ({rss} bytes) is above {RSS_WATERMARK:.0%} of memory_limit"
    return None
